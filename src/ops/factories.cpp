#include "mixtrain/core/factories.h"

#include <cmath>

#include "backends/copy.h"
#include "mixtrain/base/dtype_traits.h"
#include "mixtrain/base/error.h"

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

namespace {
// libtorch's rule: integers when every bound is, else the default float dtype.
DType arange_dtype(const Scalar& start, const Scalar& end, const Scalar& step, const TensorOptions& options) {
  if (options.has_dtype()) return options.dtype();
  return start.isFloatingPoint() || end.isFloatingPoint() || step.isFloatingPoint() ? kFloat32 : kInt64;
}
}  // namespace

Tensor arange(const Scalar& start_s, const Scalar& end_s, const Scalar& step_s, const TensorOptions& options) {
  const DType dtype = arange_dtype(start_s, end_s, step_s, options);
  const TensorOptions opts = TensorOptions(options).dtype(dtype);
  if (!start_s.isFloatingPoint() && !end_s.isFloatingPoint() && !step_s.isFloatingPoint() && !is_floating(dtype)) {
    // Exact in int64, where doubles would round above 2^53.
    const int64_t start = start_s.toLong(), end = end_s.toLong(), step = step_s.toLong();
    MT_CHECK(step != 0, "arange: step must be non-zero");
    MT_CHECK((step > 0 && end >= start) || (step < 0 && end <= start), "arange: range [", start, ", ", end,
             ") with step ", step, " is empty in the wrong direction");
    const uint64_t span = step > 0 ? static_cast<uint64_t>(end) - static_cast<uint64_t>(start)
                                   : static_cast<uint64_t>(start) - static_cast<uint64_t>(end);
    const uint64_t mag = step > 0 ? static_cast<uint64_t>(step) : 0 - static_cast<uint64_t>(step);
    const uint64_t count = span / mag + (span % mag != 0);
    MT_CHECK(count < (uint64_t{1} << 62), "arange: range [", start, ", ", end, ") with step ", step, " has ", count,
             " elements, too many for a tensor");
    std::vector<int64_t> values(static_cast<size_t>(count));
    for (size_t i = 0; i < values.size(); ++i) values[i] = start + static_cast<int64_t>(i) * step;
    return from_vector(values, {static_cast<int64_t>(count)}, opts);
  }
  const double start = start_s.toDouble(), end = end_s.toDouble(), step = step_s.toDouble();
  MT_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step), "arange: start, end and step must be ",
           "finite, got [", start, ", ", end, ") with step ", step);
  MT_CHECK(step != 0.0, "arange: step must be non-zero");
  const double count = std::ceil((end - start) / step);
  MT_CHECK(count >= 0, "arange: range [", start, ", ", end, ") with step ", step, " is empty in the wrong direction");
  // 2^62 elements would not fit in memory anyway; the bound keeps the cast to int64 defined.
  MT_CHECK(count < 4611686018427387904.0, "arange: range [", start, ", ", end, ") with step ", step, " has ", count,
           " elements, too many for a tensor");
  return generate({static_cast<int64_t>(count)}, opts, [&](int64_t i) { return start + static_cast<double>(i) * step; });
}

Tensor arange(const Scalar& start, const Scalar& end, const TensorOptions& options) {
  return arange(start, end, Scalar(int64_t{1}), options);
}
Tensor arange(const Scalar& end, const TensorOptions& options) { return arange(Scalar(int64_t{0}), end, Scalar(int64_t{1}), options); }

// ---- tensor({...}) ------------------------------------------------------------------------------

namespace {
// libtorch's compute_desired_dtype: C++ int literals mean int64 and double literals the default
// float dtype, as the same literals do in Python.
DType natural_dtype(const Scalar& v) {
  switch (v.kind()) {
    case Scalar::Kind::Floating: return kFloat32;
    case Scalar::Kind::Integral: return kInt64;
    case Scalar::Kind::Bool: return kBool;
  }
  return kFloat32;
}
}  // namespace

TensorData::TensorData(const Scalar& value) : shape_(), dtype_(natural_dtype(value)), values_{value} {}  // 0-d
TensorData::TensorData(Half v) : TensorData(Scalar(v)) { dtype_ = kFloat16; }
TensorData::TensorData(BFloat16 v) : TensorData(Scalar(v)) { dtype_ = kBFloat16; }

TensorData::TensorData(std::initializer_list<TensorData> items) {
  shape_ = {static_cast<int64_t>(items.size())};
  if (items.size() == 0) return;  // tensor({}): [0] float32, as libtorch
  const TensorData& first = *items.begin();
  shape_.insert(shape_.end(), first.shape_.begin(), first.shape_.end());
  dtype_ = first.dtype_;
  for (const TensorData& item : items) {
    MT_CHECK(item.shape_ == first.shape_, "tensor: the list is not rectangular: an item of shape ",
             shape_str(item.shape_), " beside one of shape ", shape_str(first.shape_));
    dtype_ = promote_types(dtype_, item.dtype_);
    values_.insert(values_.end(), item.values_.begin(), item.values_.end());
  }
}

Tensor tensor(const TensorData& data, const TensorOptions& options) {
  const TensorOptions opts = TensorOptions(options).dtype(options.has_dtype() ? options.dtype() : data.dtype());
  const std::vector<Scalar>& v = data.values();
  if (is_floating(data.dtype())) {
    std::vector<double> host(v.size());
    for (size_t i = 0; i < v.size(); ++i) host[i] = v[i].toDouble();
    return from_vector(host, data.shape(), opts);
  }
  std::vector<int64_t> host(v.size());  // bools as 0/1, which the cast to bool keeps
  for (size_t i = 0; i < v.size(); ++i) host[i] = v[i].toLong();
  return from_vector(host, data.shape(), opts);
}

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
