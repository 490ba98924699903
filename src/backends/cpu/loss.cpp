// Negative log-likelihood over log-probabilities, with ignore_index and label smoothing.
#include <cmath>
#include <limits>

#include "backends/loss.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"

namespace mixtrain::backends::cpu {

void nll_loss(const Tensor& logp, const Tensor& target, int64_t outer, int64_t classes, int64_t inner,
                          const NllLossArgs& args, const Tensor& loss, const Tensor& count) {
  const int64_t* pt = target.data_ptr<int64_t>();
  for (int64_t k = 0; k < outer * inner; ++k) {
    const int64_t t = pt[k];
    MT_CHECK(t == args.ignore_index || (t >= 0 && t < classes), "cross_entropy: target ", t, " at position ", k,
             " is out of range for ", classes, " classes (ignore_index is ", args.ignore_index, ")");
  }
  dispatch_floating(logp.dtype(), "nll_loss", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pl = static_cast<const T*>(logp.raw_data());
    double total = 0;
    int64_t valid = 0;
    const double eps = args.label_smoothing;
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t t = pt[o * inner + i];
        if (t == args.ignore_index) continue;
        ++valid;
        const T* row = pl + o * classes * inner + i;
        double term = -(1.0 - eps) * static_cast<double>(static_cast<acc_t<T>>(row[t * inner]));
        if (eps != 0.0) {
          double all = 0;
          for (int64_t c = 0; c < classes; ++c) all += static_cast<double>(static_cast<acc_t<T>>(row[c * inner]));
          term -= eps * all / static_cast<double>(classes);
        }
        total += term;
      }
    }
    const double mean = valid ? total / static_cast<double>(valid) : std::numeric_limits<double>::quiet_NaN();
    *static_cast<T*>(loss.raw_data()) = static_cast<T>(static_cast<acc_t<T>>(mean));
    *count.data_ptr<int64_t>() = valid;
  });
}

void nll_loss_backward(const Tensor& target, int64_t outer, int64_t classes, int64_t inner,
                                   const NllLossArgs& args, const Tensor& grad_loss, const Tensor& count,
                                   const Tensor& grad_logp) {
  const int64_t* pt = target.data_ptr<int64_t>();
  const int64_t valid = *count.data_ptr<int64_t>();
  fill(DeviceType::CPU, grad_logp, 0.0);
  if (valid == 0) return;
  dispatch_floating(grad_logp.dtype(), "nll_loss_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const double g = static_cast<double>(static_cast<A>(*static_cast<const T*>(grad_loss.raw_data())));
    const double scale = -g / static_cast<double>(valid);
    const double eps = args.label_smoothing;
    T* pg = static_cast<T*>(grad_logp.raw_data());
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t t = pt[o * inner + i];
        if (t == args.ignore_index) continue;
        T* row = pg + o * classes * inner + i;
        if (eps != 0.0) {
          const A smooth = static_cast<A>(scale * eps / static_cast<double>(classes));
          for (int64_t c = 0; c < classes; ++c) row[c * inner] = static_cast<T>(smooth);
        }
        row[t * inner] = static_cast<T>(static_cast<A>(scale * (1.0 - eps) + (eps != 0.0 ? scale * eps / classes : 0.0)));
      }
    }
  });
}

void register_loss() {
  backends::nll_loss.set(DeviceType::CPU, nll_loss);
  backends::nll_loss_backward.set(DeviceType::CPU, nll_loss_backward);
}

}  // namespace mixtrain::backends::cpu
