// Copies between any two dtypes and layouts, fills and random fills.
#include <cstring>

#include "backends/copy.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/fp8_convert.h"
#include "backends/cpu/loops.h"

namespace mixtrain::backends::cpu {

namespace {

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
// Contiguous casts to and from fp8 (plain: e4m3fn saturates, e5m2 overflows to inf) through the
// bulk converters, split over the threads. False when neither side is fp8 or the other side is
// not fp32, fp16 or bf16.
bool copy_float8_contiguous(const Tensor& src, const Tensor& dst) {
  const int64_t n = src.numel();
  const DType from = src.dtype(), to = dst.dtype();
  if (!is_float8(from) && !is_float8(to)) return false;
  auto to_fp8 = [&](const auto* in) {
    uint8_t* out = static_cast<uint8_t*>(dst.raw_data());
    parallel_for(n, kParallelGrain,
                 [&](int64_t b, int64_t e) { to_fp8_array(in + b, out + b, e - b, to, nullptr, false, false); });
    return true;
  };
  auto from_fp8 = [&](auto* out) {
    const uint8_t* in = static_cast<const uint8_t*>(src.raw_data());
    parallel_for(n, kParallelGrain, [&](int64_t b, int64_t e) { from_fp8_array(in + b, out + b, e - b, from); });
    return true;
  };
  if (is_float8(to)) {
    if (from == kFloat32) return to_fp8(src.data_ptr<float>());
    if (from == kFloat16) return to_fp8(src.data_ptr<Half>());
    if (from == kBFloat16) return to_fp8(src.data_ptr<BFloat16>());
    return false;
  }
  if (to == kFloat32) return from_fp8(dst.data_ptr<float>());
  if (to == kFloat16) return from_fp8(dst.data_ptr<Half>());
  if (to == kBFloat16) return from_fp8(dst.data_ptr<BFloat16>());
  return false;
}

}  // namespace

void copy(const Tensor& src, const Tensor& dst) {
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
    if (copy_float8_contiguous(src, dst)) return;
  }
  dispatch_all_and_float8(dst.dtype(), "copy", [&](auto to_tag) {
    using To = typename decltype(to_tag)::type;
    dispatch_all_and_float8(src.dtype(), "copy", [&](auto from_tag) {
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

void fill(const Tensor& dst, double value) {
  dispatch_all_and_float8(dst.dtype(), "fill", [&](auto tag) {
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

Tensor as_nchw(const Tensor& t) {
  if (!t.defined() || t.is_contiguous()) return t;
  Tensor c = Tensor::empty(t.shape(), t.options());
  backends::copy(DeviceType::CPU, t, c);
  return c;
}

void register_copy() {
  backends::copy.set(DeviceType::CPU, copy);
  backends::fill.set(DeviceType::CPU, fill);
}

}  // namespace mixtrain::backends::cpu
