#pragma once
// Tensor factories, as in PyTorch.
#include <vector>

#include "mixtrain/core/rng.h"
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
Tensor arange(double start, double end, double step = 1.0, const TensorOptions& options = {});
Tensor arange(double end, const TensorOptions& options = {});
Tensor scalar_tensor(double value, const TensorOptions& options = {});

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
