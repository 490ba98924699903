// Reductions, softmax and log_softmax over the middle axis of an [outer, n, inner] view.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/reduce.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "backends/reduce_math.h"

namespace mixtrain::backends::cpu {

namespace {
// Sums accumulate in double whatever the storage type: cheap here, and the result is then
// rounded once to the output dtype, which is at least as accurate as the GPU's fp32 tree sum.
template <class T>
using sum_t = std::conditional_t<std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>,
                                 double, int64_t>;
// The larger of two norm parts; a NaN wins, as torch.max propagates it.
double max_keeping_nan(double total, double part) { return (part > total || part != part) ? part : total; }

// One pass over a contiguous gradient: sum of |g|^p (p = 2 fast path) or max |g|, in fp64.
// Split in fixed chunks whose partial results are combined in order, so the value does not
// depend on the number of threads.
template <class T>
double grad_norm_part(const T* g, int64_t n, double p) {
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(static_cast<size_t>(chunks), 0.0);
  const bool inf = std::isinf(p);
  parallel_for(chunks, n > kChunk ? 1 : chunks, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t b = c * kChunk, e = std::min(n, b + kChunk);
      double acc = 0.0;
      if (inf) {
        for (int64_t i = b; i < e; ++i) {
          acc = max_keeping_nan(acc, std::fabs(static_cast<double>(static_cast<acc_t<T>>(g[i]))));
        }
      } else if (p == 2.0) {
        acc = lane_sum(e - b, [&](int64_t i) {
          const double v = static_cast<double>(static_cast<acc_t<T>>(g[b + i]));
          return v * v;
        });
      } else {
        for (int64_t i = b; i < e; ++i) acc += std::pow(std::fabs(static_cast<double>(static_cast<acc_t<T>>(g[i]))), p);
      }
      part[static_cast<size_t>(c)] = acc;
    }
  });
  double total = 0.0;
  for (double v : part) total = inf ? max_keeping_nan(total, v) : total + v;
  return total;
}

}  // namespace

void reduce(ReduceOp op, const Tensor& x, int64_t outer, int64_t n, int64_t inner, const Tensor& out,
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
                if (math::is_nan(best)) break;  // NaN wins and stays
                if (is_max ? math::takes_over<ReduceOp::Max>(best, v) : math::takes_over<ReduceOp::Min>(best, v)) {
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

void topk(const Tensor& x, int64_t rows, int64_t n, int64_t k, bool largest, const Tensor& values,
          const Tensor& indices) {
  MT_CHECK(x.is_contiguous() && values.is_contiguous() && indices.is_contiguous(), "topk: expected contiguous tensors");
  dispatch_all(x.dtype(), "topk", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* px = x.data_ptr<T>();
    T* pv = values.data_ptr<T>();
    int64_t* pi = indices.data_ptr<int64_t>();
    parallel_for(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, n)), [&](int64_t rb, int64_t re) {
      std::vector<int64_t> order(static_cast<size_t>(n));
      for (int64_t r = rb; r < re; ++r) {
        const T* row = px + r * n;
        auto before = [&](int64_t i, int64_t j) {
          return math::topk_before(static_cast<A>(row[i]), i, static_cast<A>(row[j]), j, largest);
        };
        for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
        std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
        for (int64_t j = 0; j < k; ++j) {
          pv[r * k + j] = row[order[static_cast<size_t>(j)]];
          pi[r * k + j] = order[static_cast<size_t>(j)];
        }
      }
    });
  });
}

void topk_backward(const Tensor& grad, const Tensor& indices, int64_t rows, int64_t n, int64_t k, const Tensor& grad_x) {
  MT_CHECK(grad.is_contiguous() && indices.is_contiguous() && grad_x.is_contiguous(),
           "topk_backward: expected contiguous tensors");
  dispatch_floating(grad_x.dtype(), "topk_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pg = grad.data_ptr<T>();
    const int64_t* pi = indices.data_ptr<int64_t>();
    T* px = grad_x.data_ptr<T>();
    parallel_for(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, n)), [&](int64_t rb, int64_t re) {
      for (int64_t r = rb; r < re; ++r) {
        std::fill(px + r * n, px + (r + 1) * n, T(0.0f));
        for (int64_t j = 0; j < k; ++j) px[r * n + pi[r * k + j]] = pg[r * k + j];
      }
    });
  });
}

void norm_part(const Tensor& x, double p, const Tensor& out) {
  MT_CHECK(x.is_dense() && out.dtype() == kFloat64 && out.numel() == 1 && out.device().is_cpu(),
           "norm_part: expected a dense input and a 1-element float64 host output, got ", x.summary(), " and ", out.summary());
  dispatch_floating(x.dtype(), "norm_part", [&](auto tag) {
    using T = typename decltype(tag)::type;
    *out.data_ptr<double>() = grad_norm_part(x.data_ptr<T>(), x.numel(), p);
  });
}

void register_reduce() {
  backends::reduce.set(DeviceType::CPU, reduce);
  backends::norm_part.set(DeviceType::CPU, norm_part);
  backends::topk.set(DeviceType::CPU, topk);
  backends::topk_backward.set(DeviceType::CPU, topk_backward);
}

}  // namespace mixtrain::backends::cpu
