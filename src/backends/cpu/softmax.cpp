// Softmax and log-softmax over the middle axis, with the causal mask of attention scores.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/softmax.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "backends/softmax_math.h"

namespace mixtrain::backends::cpu {

void softmax(const Tensor& x, int64_t outer, int64_t n, int64_t inner, bool log, int64_t causal_rows,
                         const Tensor& out) {
  MT_CHECK(x.is_contiguous() && out.dtype() == x.dtype(), "softmax: expected a contiguous input of the output dtype");
  MT_CHECK(causal_rows == 0 || (inner == 1 && !log), "softmax: a causal mask needs rows (inner == 1), not log");
  dispatch_floating(x.dtype(), log ? "log_softmax" : "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* px = static_cast<const T*>(x.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    parallel_for(outer * inner, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, n)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t o = r / inner, i = r % inner;
        const T* row = px + o * n * inner + i;
        T* orow = po + o * n * inner + i;
        const int64_t kept = causal_rows > 0 ? std::min(n, o % causal_rows + 1) : n;
        A mx = -std::numeric_limits<A>::infinity();
        for (int64_t j = 0; j < kept; ++j) mx = std::max(mx, static_cast<A>(row[j * inner]));
        mx = math::softmax_shift(mx);
        A total = 0;
        for (int64_t j = 0; j < kept; ++j) total += math::m_exp(static_cast<A>(row[j * inner]) - mx);
        if (log) {
          const A lse = math::log_softmax_lse(mx, total);
          for (int64_t j = 0; j < n; ++j) orow[j * inner] = static_cast<T>(static_cast<A>(row[j * inner]) - lse);
        } else {
          const A inv = A(1) / total;
          for (int64_t j = 0; j < kept; ++j) orow[j * inner] = static_cast<T>(math::softmax_value(static_cast<A>(row[j * inner]), mx, inv));
          for (int64_t j = kept; j < n; ++j) orow[j * inner] = T(0);
        }
      }
    });
  });
}

void softmax_backward(const Tensor& y, const Tensor& grad_y, int64_t outer, int64_t n, int64_t inner,
                                  bool log, const Tensor& grad_x) {
  MT_CHECK(y.is_contiguous() && grad_y.is_contiguous(), "softmax_backward: expected contiguous tensors");
  dispatch_floating(y.dtype(), "softmax_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* py = static_cast<const T*>(y.raw_data());
    const T* pg = static_cast<const T*>(grad_y.raw_data());
    T* px = static_cast<T*>(grad_x.raw_data());
    parallel_for(outer * inner, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, n)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t base = (r / inner) * n * inner + r % inner;
        A dot = 0;
        for (int64_t j = 0; j < n; ++j) {
          const int64_t k = base + j * inner;
          dot += math::softmax_backward_term(log, static_cast<A>(py[k]), static_cast<A>(pg[k]));
        }
        for (int64_t j = 0; j < n; ++j) {
          const int64_t k = base + j * inner;
          const A yv = static_cast<A>(py[k]), gv = static_cast<A>(pg[k]);
          px[k] = static_cast<T>(math::softmax_backward_value(log, yv, gv, dot));
        }
      }
    });
  });
}

void register_softmax() {
  backends::softmax.set(DeviceType::CPU, softmax);
  backends::softmax_backward.set(DeviceType::CPU, softmax_backward);
}

}  // namespace mixtrain::backends::cpu
