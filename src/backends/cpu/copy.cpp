// Copies between any two dtypes and layouts, fills and random fills.
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "mixtrain/core/rng.h"

namespace mixtrain::backends::cpu {

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

namespace {
template <class To, class From>
To convert(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return static_cast<float>(v) != 0.0f;
  } else if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>) {
    return static_cast<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    // fp64 -> half through fp32 would round twice; PyTorch rounds double to float first as well,
    // and so does the GPU, so we match them.
    return To(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

template <class A, class B>
constexpr bool kBulkConvertible = (std::is_same_v<A, float> && (std::is_same_v<B, Half> || std::is_same_v<B, BFloat16>)) ||
                                  (std::is_same_v<B, float> && (std::is_same_v<A, Half> || std::is_same_v<A, BFloat16>));

// One run of a strided copy. Unit-stride runs (a permuted tensor's rows) take memcpy or the bulk
// converters; the rest go element by element.
template <class To, class From>
void copy_run(char* dst, const char* src, int64_t n, int64_t dst_stride, int64_t src_stride) {
  if (dst_stride == int64_t(sizeof(To)) && src_stride == int64_t(sizeof(From))) {
    if constexpr (std::is_same_v<To, From>) {
      std::memcpy(dst, src, n * sizeof(To));
      return;
    } else if constexpr (kBulkConvertible<To, From>) {
      convert_array(reinterpret_cast<const From*>(src), reinterpret_cast<To*>(dst), n);
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i)
    *reinterpret_cast<To*>(dst + i * dst_stride) = convert<To>(*reinterpret_cast<const From*>(src + i * src_stride));
}
}  // namespace

void CpuBackend::copy(const Tensor& src, const Tensor& dst) {
  MT_CHECK(src.shape() == dst.shape(), "copy: shapes ", shape_str(src.shape()), " and ", shape_str(dst.shape()),
           " differ");
  // Fast paths for the casts AMP does all the time.
  if (src.is_contiguous() && dst.is_contiguous()) {
    const int64_t n = src.numel();
    if (src.dtype() == dst.dtype()) {
      std::memcpy(dst.raw_data(), src.raw_data(), n * element_size(src.dtype()));
      return;
    }
    if (src.dtype() == kFloat32 && dst.dtype() == kFloat16)
      return convert_parallel(src.data_ptr<float>(), n, dst.data_ptr<Half>());
    if (src.dtype() == kFloat16 && dst.dtype() == kFloat32)
      return convert_parallel(src.data_ptr<Half>(), n, dst.data_ptr<float>());
    if (src.dtype() == kFloat32 && dst.dtype() == kBFloat16)
      return convert_parallel(src.data_ptr<float>(), n, dst.data_ptr<BFloat16>());
    if (src.dtype() == kBFloat16 && dst.dtype() == kFloat32)
      return convert_parallel(src.data_ptr<BFloat16>(), n, dst.data_ptr<float>());
  }
  dispatch_all(dst.dtype(), "copy", [&](auto to_tag) {
    using To = typename decltype(to_tag)::type;
    dispatch_all(src.dtype(), "copy", [&](auto from_tag) {
      using From = typename decltype(from_tag)::type;
      std::array<char*, 2> base{static_cast<char*>(dst.raw_data()), static_cast<char*>(src.raw_data())};
      std::array<const int64_t*, 2> strides{dst.strides().data(), src.strides().data()};
      std::array<int64_t, 2> sizes{sizeof(To), sizeof(From)};
      strided_loop<2>(dst.shape(), base, strides, sizes,
                      [](const std::array<char*, 2>& p, int64_t n, const std::array<int64_t, 2>& s) {
                        copy_run<To, From>(p[0], p[1], n, s[0], s[1]);
                      });
    });
  });
}

void CpuBackend::fill(const Tensor& dst, double value) {
  dispatch_all(dst.dtype(), "fill", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = convert<T>(value);
    std::array<char*, 1> base{static_cast<char*>(dst.raw_data())};
    std::array<const int64_t*, 1> strides{dst.strides().data()};
    std::array<int64_t, 1> sizes{sizeof(T)};
    strided_loop<1>(dst.shape(), base, strides, sizes,
                    [v](const std::array<char*, 1>& p, int64_t n, const std::array<int64_t, 1>& s) {
                      for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = v;
                    });
  });
}

}  // namespace mixtrain::backends::cpu

namespace mixtrain::backends::cpu {

void CpuBackend::random(const Tensor& dst, RandomKind kind, uint64_t seed, uint64_t offset) {
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

void CpuBackend::dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset, const Tensor& out) {
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
        const bool keep = static_cast<float>(random_uniform(seed, offset + static_cast<uint64_t>(i))) >= threshold;
        po[i] = static_cast<T>(static_cast<A>(px[i]) * (keep ? scale : A(0)));  // x * 0: NaN stays NaN
      }
    });
  });
}

Tensor as_nchw(const Tensor& t) {
  if (!t.defined() || t.is_contiguous()) return t;
  Tensor c = Tensor::empty(t.shape(), t.options());
  cpu_backend().copy(t, c);
  return c;
}

}  // namespace mixtrain::backends::cpu
