// Reductions, softmax and log_softmax over the middle axis of an [outer, n, inner] view.
#include <cmath>
#include <limits>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"

namespace mixtrain::backends::cpu {

namespace {
// Sums accumulate in double whatever the storage type: cheap here, and the result is then
// rounded once to the output dtype, which is at least as accurate as the GPU's fp32 tree sum.
template <class T>
using sum_t = std::conditional_t<std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>,
                                 double, int64_t>;
}  // namespace

void CpuBackend::reduce(ReduceOp op, const Tensor& x, int64_t outer, int64_t n, int64_t inner, const Tensor& out,
                        const Tensor& indices) {
  MT_CHECK(x.is_contiguous() && out.is_contiguous(), "reduce: expected contiguous tensors");
  dispatch_all(x.dtype(), "reduce", [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_all(out.dtype(), "reduce", [&](auto out_tag) {
      using TO = typename decltype(out_tag)::type;
      const T* px = static_cast<const T*>(x.raw_data());
      TO* po = static_cast<TO*>(out.raw_data());
      int64_t* pi = indices.defined() ? indices.data_ptr<int64_t>() : nullptr;
      parallel_for(outer, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, n * inner)), [&](int64_t ob, int64_t oe) {
        std::vector<sum_t<T>> acc(inner);
        std::vector<int64_t> arg(inner);
        // Sums read half inputs widened in bulk (as_acc: F16C where the CPU has it), which is exact.
        std::vector<acc_t<T>> wide;
        for (int64_t o = ob; o < oe; ++o) {
          const T* base = px + o * n * inner;
          if (op == ReduceOp::Sum && inner == 1) {
            const acc_t<T>* w = as_acc(base, n, wide);
            const sum_t<T> total = lane_sum<sum_t<T>>(n, [&](int64_t j) { return static_cast<sum_t<T>>(w[j]); });
            po[o] = static_cast<TO>(static_cast<acc_t<TO>>(total));
          } else if (op == ReduceOp::Sum) {
            std::fill(acc.begin(), acc.end(), sum_t<T>(0));
            const acc_t<T>* w = as_acc(base, n * inner, wide);
            for (int64_t j = 0; j < n; ++j)
              for (int64_t i = 0; i < inner; ++i) acc[i] += static_cast<sum_t<T>>(w[j * inner + i]);
            for (int64_t i = 0; i < inner; ++i) po[o * inner + i] = static_cast<TO>(static_cast<acc_t<TO>>(acc[i]));
          } else {
            const bool is_max = op == ReduceOp::Max;
            for (int64_t i = 0; i < inner; ++i) {
              acc_t<T> best = static_cast<acc_t<T>>(base[i]);
              int64_t best_j = 0;
              for (int64_t j = 1; j < n; ++j) {
                const acc_t<T> v = static_cast<acc_t<T>>(base[j * inner + i]);
                if (best != best) break;  // NaN wins and stays
                if (v != v || (is_max ? v > best : v < best)) {
                  best = v;
                  best_j = j;
                }
              }
              po[o * inner + i] = static_cast<TO>(best);
              if (pi) pi[o * inner + i] = best_j;
            }
          }
        }
      });
    });
  });
}

void CpuBackend::softmax(const Tensor& x, int64_t outer, int64_t n, int64_t inner, bool log, int64_t causal_rows,
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
        if (std::isinf(mx) && mx < 0) mx = 0;  // all -inf: keep exp finite so the row becomes NaN/0 as torch
        A total = 0;
        for (int64_t j = 0; j < kept; ++j) total += std::exp(static_cast<A>(row[j * inner]) - mx);
        if (log) {
          const A lse = mx + std::log(total);
          for (int64_t j = 0; j < n; ++j) orow[j * inner] = static_cast<T>(static_cast<A>(row[j * inner]) - lse);
        } else {
          const A inv = A(1) / total;
          for (int64_t j = 0; j < kept; ++j) orow[j * inner] = static_cast<T>(std::exp(static_cast<A>(row[j * inner]) - mx) * inv);
          for (int64_t j = kept; j < n; ++j) orow[j * inner] = T(0);
        }
      }
    });
  });
}

void CpuBackend::softmax_backward(const Tensor& y, const Tensor& grad_y, int64_t outer, int64_t n, int64_t inner,
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
          dot += log ? static_cast<A>(pg[k]) : static_cast<A>(pg[k]) * static_cast<A>(py[k]);
        }
        for (int64_t j = 0; j < n; ++j) {
          const int64_t k = base + j * inner;
          const A yv = static_cast<A>(py[k]), gv = static_cast<A>(pg[k]);
          px[k] = static_cast<T>(log ? gv - std::exp(yv) * dot : yv * (gv - dot));
        }
      }
    });
  });
}

}  // namespace mixtrain::backends::cpu
