#include "mixtrain/core/factories.h"

#include <cmath>

#include "backends/copy.h"
#include "mixtrain/core/dtype_traits.h"
#include "mixtrain/core/error.h"

namespace mixtrain {

namespace {
// Random and host-built values are produced on the CPU in fp64, then cast and moved once.
Tensor finish(const Tensor& host_f64, const TensorOptions& options) {
  Tensor t = Tensor::empty(host_f64.shape(), TensorOptions().dtype(options.dtype()).device(options.device()));
  if (options.device().is_cpu()) {
    backends::copy(DeviceType::CPU, host_f64, t);
  } else {
    Tensor cast = Tensor::empty(host_f64.shape(), TensorOptions().dtype(options.dtype()));
    backends::copy(DeviceType::CPU, host_f64, cast);
    backends::copy(options.device().type, cast, t);
  }
  if (options.requires_grad()) t.set_requires_grad(true);
  return t;
}

template <class F>
Tensor generate(const Shape& shape, const TensorOptions& options, F&& f) {
  Tensor host = Tensor::empty(shape, TensorOptions(kFloat64));
  double* p = host.data_ptr<double>();
  for (int64_t i = 0, n = host.numel(); i < n; ++i) p[i] = f(i);
  return finish(host, options);
}
}  // namespace

Tensor empty(const Shape& shape, const TensorOptions& options) { return Tensor::empty(shape, options); }

Tensor full(const Shape& shape, double value, const TensorOptions& options) {
  Tensor t = Tensor::empty(shape, TensorOptions().dtype(options.dtype()).device(options.device()));
  backends::fill(t, t, value);
  if (options.requires_grad()) t.set_requires_grad(true);
  return t;
}

Tensor zeros(const Shape& shape, const TensorOptions& options) { return full(shape, 0.0, options); }
Tensor ones(const Shape& shape, const TensorOptions& options) { return full(shape, 1.0, options); }
Tensor scalar_tensor(double value, const TensorOptions& options) { return full({}, value, options); }

Tensor randint(int64_t low, int64_t high, const Shape& shape, const TensorOptions& options) {
  MT_CHECK(high > low, "randint: empty range [", low, ", ", high, ")");
  const uint64_t span = static_cast<uint64_t>(high - low);
  // One reservation for the whole tensor: the same values as a next_u64() per element, and the
  // tensor's draws stay contiguous when other threads draw from the default generator too.
  Tensor host = Tensor::empty(shape, TensorOptions(kFloat64));
  const GeneratorState draws = default_generator().reserve_draws(static_cast<uint64_t>(host.numel()));
  double* p = host.data_ptr<double>();
  for (int64_t i = 0, n = host.numel(); i < n; ++i)
    p[i] = static_cast<double>(low + static_cast<int64_t>(random_draw(draws.seed, draws.offset + static_cast<uint64_t>(i)) % span));
  return finish(host, options);
}

Tensor arange(double start, double end, double step, const TensorOptions& options) {
  MT_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step), "arange: start, end and step must be ",
           "finite, got [", start, ", ", end, ") with step ", step);
  MT_CHECK(step != 0.0, "arange: step must be non-zero");
  const double count = std::ceil((end - start) / step);
  MT_CHECK(count >= 0, "arange: range [", start, ", ", end, ") with step ", step, " is empty in the wrong direction");
  // 2^62 elements would not fit in memory anyway; the bound keeps the cast to int64 defined.
  MT_CHECK(count < 4611686018427387904.0, "arange: range [", start, ", ", end, ") with step ", step, " has ", count,
           " elements, too many for a tensor");
  return generate({static_cast<int64_t>(count)}, options, [&](int64_t i) { return start + static_cast<double>(i) * step; });
}

Tensor arange(double end, const TensorOptions& options) { return arange(0.0, end, 1.0, options); }

// In t's layout (PyTorch's preserve_format): a channels-last tensor gets a channels-last twin.
Tensor empty_like(const Tensor& t) { return Tensor::empty(t.shape(), t.options(), t.suggest_memory_format()); }
Tensor zeros_like(const Tensor& t) { return empty_like(t).zero_(); }
Tensor ones_like(const Tensor& t) { return empty_like(t).fill_(1.0); }

template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, const TensorOptions& options) {
  MT_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_vector: ", values.size(),
           " values do not fill shape ", shape_str(shape), " (", shape_numel(shape), " elements)");
  Tensor host = Tensor::empty(shape, TensorOptions(dtype_of<T>::value));
  std::copy(values.begin(), values.end(), host.data_ptr<T>());
  if (options.dtype() == dtype_of<T>::value && options.device().is_cpu()) {
    if (options.requires_grad()) host.set_requires_grad(true);
    return host;
  }
  return finish(host, options);
}

template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape) {
  return from_vector(values, shape, TensorOptions(dtype_of<T>::value));
}

#define MT_INSTANTIATE_FROM_VECTOR(T)                                                         \
  template Tensor from_vector<T>(const std::vector<T>&, const Shape&, const TensorOptions&); \
  template Tensor from_vector<T>(const std::vector<T>&, const Shape&);
MT_INSTANTIATE_FROM_VECTOR(float)
MT_INSTANTIATE_FROM_VECTOR(double)
MT_INSTANTIATE_FROM_VECTOR(Half)
MT_INSTANTIATE_FROM_VECTOR(BFloat16)
MT_INSTANTIATE_FROM_VECTOR(int64_t)
MT_INSTANTIATE_FROM_VECTOR(int32_t)
#undef MT_INSTANTIATE_FROM_VECTOR

}  // namespace mixtrain
