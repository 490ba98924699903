// Random fills from the counter-based generator and dropout, whose mask comes from the same draws.
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "backends/random.h"
#include "mixtrain/base/rng.h"

namespace mixtrain::backends::cpu {

void random(const Tensor& dst, RandomKind kind, uint64_t seed, uint64_t offset) {
  MT_CHECK(dst.is_contiguous(), "random: expected a contiguous output, got ", dst.summary());
  dispatch_floating(dst.dtype(), "random", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(dst.raw_data());
    parallel_for(dst.numel(), kParallelGrain / 16, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const uint64_t k = static_cast<uint64_t>(i);
        p[i] = convert<T>(kind == RandomKind::Uniform ? random_uniform(seed, offset + k)
                                                       : random_normal(seed, offset + 2 * k));
      }
    });
  });
}

void dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset, const Tensor& out) {
  MT_CHECK(x.is_contiguous() && out.is_contiguous() && x.dtype() == out.dtype() && x.shape() == out.shape(),
           "dropout: expected contiguous input and output of one dtype and shape, got ", x.summary(), " and ", out.summary());
  const float threshold = static_cast<float>(p);
  dispatch_floating(x.dtype(), "dropout", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const A scale = static_cast<A>(convert<T>(1.0 / (1.0 - p)));
    const T* px = static_cast<const T*>(x.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    parallel_for(x.numel(), kParallelGrain / 16, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const bool keep = dropout_keep(seed, offset + static_cast<uint64_t>(i), threshold);
        po[i] = static_cast<T>(static_cast<A>(px[i]) * (keep ? scale : A(0)));  // x * 0: NaN stays NaN
      }
    });
  });
}

void register_random() {
  backends::random.set(DeviceType::CPU, random);
  backends::dropout.set(DeviceType::CPU, dropout);
}

}  // namespace mixtrain::backends::cpu
