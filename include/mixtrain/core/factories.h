#pragma once
// Tensor factories, as in PyTorch.
#include <initializer_list>
#include <vector>

#include "mixtrain/base/rng.h"
#include "mixtrain/base/scalar.h"
#include "mixtrain/core/tensor.h"

namespace mixtrain {

Tensor empty(const Shape& shape, const TensorOptions& options = {});
Tensor zeros(const Shape& shape, const TensorOptions& options = {});
Tensor ones(const Shape& shape, const TensorOptions& options = {});
Tensor full(const Shape& shape, double value, const TensorOptions& options = {});
Tensor rand(const Shape& shape, const TensorOptions& options = {});   // U[0, 1)
Tensor randn(const Shape& shape, const TensorOptions& options = {});  // N(0, 1)
Tensor rand(const Shape& shape, Generator& gen, const TensorOptions& options = {});
Tensor randn(const Shape& shape, Generator& gen, const TensorOptions& options = {});
// Integers uniform in [low, high).
Tensor randint(int64_t low, int64_t high, const Shape& shape, const TensorOptions& options = TensorOptions(kInt64));
// [start, end) by step, as libtorch: int64 when start, end and step are all integers
// (arange(5)), float32 when any is floating (arange(5.0), arange(0, 1, 0.25)), unless options
// give a dtype.
Tensor arange(const Scalar& end, const TensorOptions& options = {});
Tensor arange(const Scalar& start, const Scalar& end, const TensorOptions& options = {});
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, const TensorOptions& options = {});
Tensor scalar_tensor(double value, const TensorOptions& options = {});

// The values of mixtrain::tensor, as libtorch's torch::tensor takes them: a number, a (nested)
// braced list of numbers, or a std::vector. The dtype follows the values as in libtorch: integers
// give int64, floating values float32, bools bool, fp16/bf16 values their own dtype; a list that
// mixes them takes the promoted dtype (tensor({1, 2.5}) is float32, as in Python).
class TensorData {
 public:
  TensorData() = default;           // no values: tensor({}) is [0] float32, as in libtorch
  TensorData(const Scalar& value);  // NOLINT: a 0-d tensor
  TensorData(double v) : TensorData(Scalar(v)) {}     // NOLINT
  TensorData(float v) : TensorData(Scalar(v)) {}      // NOLINT
  TensorData(Half v);                                 // NOLINT
  TensorData(BFloat16 v);                             // NOLINT
  TensorData(bool v) : TensorData(Scalar(v)) {}       // NOLINT
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  TensorData(T v) : TensorData(Scalar(v)) {}          // NOLINT
  TensorData(std::initializer_list<TensorData> items);  // NOLINT: one dimension more than its items
  template <class T>
  TensorData(const std::vector<T>& values) : TensorData(from_values(values)) {}  // NOLINT: 1-D

  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }  // inferred from the values
  const std::vector<Scalar>& values() const { return values_; }  // row-major

 private:
  template <class T>
  static TensorData from_values(const std::vector<T>& values) {
    TensorData d;
    d.shape_ = {static_cast<int64_t>(values.size())};
    d.dtype_ = TensorData(T{}).dtype_;
    d.values_.reserve(values.size());
    for (const T& v : values) d.values_.emplace_back(v);
    return d;
  }

  Shape shape_ = {0};
  DType dtype_ = kFloat32;
  std::vector<Scalar> values_;
};

// A tensor holding `data`: tensor({{1, 2}, {3, 4}}) is a [2, 2] int64 tensor, tensor(2.5) a 0-d
// float32 one. options' dtype, when given, wins over the inferred one; device and requires_grad
// apply as for the other factories.
Tensor tensor(const TensorData& data, const TensorOptions& options = {});

Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);

// Copies host values into a new tensor of `shape`, converted to options' dtype; without options
// the dtype follows T (float -> float32, int64_t -> int64, ...), on the CPU.
template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, const TensorOptions& options);
template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape);

}  // namespace mixtrain
