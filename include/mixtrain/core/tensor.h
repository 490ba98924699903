#pragma once
// Tensor: a reference-counted handle over a storage, a shape, strides and a dtype, plus the
// autograd fields (grad, grad_fn). Copies of a Tensor share the same TensorImpl, as in PyTorch.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "mixtrain/base/device.h"
#include "mixtrain/base/dtype.h"
#include "mixtrain/base/elementwise_ops.h"
#include "mixtrain/base/scalar.h"
#include "mixtrain/base/shape.h"
#include "mixtrain/core/storage.h"
#include "mixtrain/core/tensor_options.h"

namespace mixtrain {

namespace autograd {
class Node;
}
class Tensor;
// Runs after a leaf's gradient was accumulated in backward, with the leaf (its grad is final for
// this backward unless the leaf is reached again).
using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;

struct TensorImpl {
  Storage storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  Shape strides;  // in elements
  DType dtype = DType::Float32;
  Device device;

  // Autograd. A leaf has no grad_fn; a non-leaf records the node that produced it.
  bool requires_grad = false;
  bool is_view = false;  // shares storage with another tensor (reshape of a non-contiguous, t(), ...)
  std::shared_ptr<autograd::Node> grad_fn;
  uint32_t output_nr = 0;
  std::shared_ptr<TensorImpl> grad;
  std::weak_ptr<autograd::Node> grad_accumulator;  // leaves: the node that accumulates into grad
  std::vector<std::pair<uint64_t, PostAccumulateGradHook>> post_accumulate_grad_hooks;
};

// The dimensions of a reduction, given as libtorch users write them: one (x.sum(1)) or several
// (x.sum({0, 2})); empty means all.
class DimList {
 public:
  DimList() = default;
  DimList(int64_t dim) : dims_{dim} {}                              // NOLINT: x.sum(1)
  DimList(std::initializer_list<int64_t> dims) : dims_(dims) {}     // NOLINT: x.sum({0, 1})
  DimList(std::vector<int64_t> dims) : dims_(std::move(dims)) {}    // NOLINT
  const std::vector<int64_t>& vec() const { return dims_; }

 private:
  std::vector<int64_t> dims_;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Uninitialised tensor of a shape; all factories build on this.
  static Tensor empty(const Shape& shape, const TensorOptions& options = {});
  // In a given layout (ChannelsLast: 4-D shapes only).
  static Tensor empty(const Shape& shape, const TensorOptions& options, MemoryFormat format);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Shape& sizes() const { return shape(); }
  int64_t size(int64_t dim) const;
  const Shape& strides() const;
  int64_t stride(int64_t dim) const;
  int64_t dim() const;
  int64_t numel() const;
  DType dtype() const;
  Device device() const;
  TensorOptions options() const;
  int64_t storage_offset() const;
  bool is_contiguous() const;
  bool is_contiguous(MemoryFormat format) const;
  // ChannelsLast for a 4-D tensor laid out NHWC: in NHWC memory order and not also NCHW, or, when
  // both fit (one channel, a 1x1 image), allocated channels-last. Else Contiguous. The layout an
  // op's output keeps.
  MemoryFormat suggest_memory_format() const;
  // Dense in one of the layouts (contiguous or channels-last), so its elements fill
  // [raw_data(), raw_data() + nbytes()) with no gap.
  bool is_dense() const { return is_contiguous() || is_contiguous(MemoryFormat::ChannelsLast); }
  // Dense with the same memory order as `other`, of the same shape: the two can be walked as flat
  // arrays side by side (what fused multi-operand kernels, like the optimizers', need).
  bool same_dense_layout(const Tensor& other) const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(dtype()); }
  // The values as PyTorch prints them: "tensor([[1., 2.],\n        [3., 4.]])", summarised with
  // "..." past PrintOptions::threshold elements, dtype shown unless float32/int64/bool, device
  // unless cpu, then grad_fn or requires_grad (ops/printing.h). operator<< prints the same.
  std::string str() const;
  // A short description for messages: "Tensor[2, 3] float32 cpu" (no values, no device sync).
  std::string summary() const;

  // Raw element pointer (storage base + offset).
  void* raw_data() const;
  template <class T> T* data_ptr() const;
  // The one element as a Scalar (floating, integral or bool, after the dtype), as libtorch's
  // item(); item<float>(), item<int64_t>() convert it.
  Scalar item() const;
  template <class T> T item() const;
  template <class T> std::vector<T> to_vector() const;

  // Autograd.
  bool requires_grad() const;
  Tensor& set_requires_grad(bool value);
  Tensor& requires_grad_(bool value = true) { return set_requires_grad(value); }
  bool is_leaf() const;
  Tensor grad() const;
  void set_grad(const Tensor& grad);
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  void backward() const;
  void backward(const Tensor& gradient) const;
  // Hooks on a leaf that requires grad, run after each accumulation into its grad (DDP starts
  // a bucket's all-reduce from one). The id removes it.
  uint64_t register_post_accumulate_grad_hook(PostAccumulateGradHook hook);
  void remove_post_accumulate_grad_hook(uint64_t id);
  Tensor detach() const;  // shares storage, no history
  Tensor clone() const;   // copies data, keeps history

  // Conversions (differentiable).
  Tensor to(DType dtype) const;
  // libtorch's to(device, dtype, non_blocking, copy). non_blocking: a host-to-CUDA copy from pinned
  // memory is queued on the device's stream and the call returns at once (the source stays alive
  // until the copy ran; do not write to it before synchronizing); from pageable memory, and in
  // every other direction, the copy is synchronous whatever the flag says. copy: always a new
  // tensor, even when device and dtype already match.
  Tensor to(Device device, bool non_blocking = false, bool copy = false) const;
  Tensor to(Device device, DType dtype, bool non_blocking = false, bool copy = false) const;
  // To other's dtype and device (libtorch's type_as; differentiable).
  Tensor type_as(const Tensor& other) const;
  Tensor float_() const { return to(DType::Float32); }
  Tensor half() const { return to(DType::Float16); }
  Tensor bfloat16() const { return to(DType::BFloat16); }
  // A contiguous copy in pinned (page-locked) host memory, or this tensor when already pinned.
  // Throws naming the tensor when it is not on the CPU, or without the CUDA backend or a device.
  Tensor pin_memory() const;
  bool is_pinned() const;  // CPU memory from the pinned allocator (views of it too)
  Tensor contiguous() const;
  // A copy in that layout unless already in it (ChannelsLast: unless suggest_memory_format says so).
  Tensor contiguous(MemoryFormat format) const;

  // Views (share storage; differentiable).
  Tensor reshape(const Shape& shape) const;
  Tensor view(const Shape& shape) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;
  Tensor permute(const Shape& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor squeeze() const;  // every dimension of size 1
  Tensor expand(const Shape& shape) const;

  // Math (methods mirror the free functions in <mixtrain/ops/functional.h>).
  // x.neg(), x.exp(), ... x.square(): one per plain unary op (mixtrain/base/elementwise_ops.h).
#define MT_PLAIN_UNARY(code, name) Tensor name() const;
  MT_FOR_PLAIN_UNARY_OPS
#undef MT_PLAIN_UNARY
  Tensor pow(double exponent) const;
  Tensor sum() const;
  Tensor sum(const DimList& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const DimList& dims, bool keepdim = false) const;
  // As libtorch: without a dim the largest element (0-d); with one, the values and their indices.
  Tensor max() const;
  std::tuple<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;
  Tensor min() const;
  std::tuple<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor argmin(int64_t dim, bool keepdim = false) const;
  // Variance and standard deviation; unbiased (divide by n - 1) by default, as in libtorch.
  // x.var() and x.var(false) reduce everything, x.var(1) and x.var({0, 1}) those dims (the int
  // overloads keep x.var(1) from meaning var(unbiased = true), libtorch's trap).
  Tensor var(bool unbiased = true) const;
  Tensor var(int dim, bool unbiased = true, bool keepdim = false) const;
  Tensor var(int64_t dim, bool unbiased = true, bool keepdim = false) const;
  Tensor var(const DimList& dims, bool unbiased = true, bool keepdim = false) const;
  Tensor std(bool unbiased = true) const;
  Tensor std(int dim, bool unbiased = true, bool keepdim = false) const;
  Tensor std(int64_t dim, bool unbiased = true, bool keepdim = false) const;
  Tensor std(const DimList& dims, bool unbiased = true, bool keepdim = false) const;
  // Rows `index` (int64, 1-D) along dim; differentiable.
  Tensor index_select(int64_t dim, const Tensor& index) const;
  // Element-wise comparisons to bool tensors (also as operators ==, !=, <, <=, >, >=).
  Tensor eq(const Tensor& other) const;
  Tensor ne(const Tensor& other) const;
  Tensor lt(const Tensor& other) const;
  Tensor le(const Tensor& other) const;
  Tensor gt(const Tensor& other) const;
  Tensor ge(const Tensor& other) const;
  Tensor eq(double other) const;
  Tensor ne(double other) const;
  Tensor lt(double other) const;
  Tensor le(double other) const;
  Tensor gt(double other) const;
  Tensor ge(double other) const;
  // Truth tests as bool tensors: whether every (any) element is non-zero, over all elements or
  // over dims. bool equal(): same shape and values; allclose: |a - b| <= atol + rtol * |b|.
  Tensor all() const;
  Tensor all(const DimList& dims, bool keepdim = false) const;
  Tensor any() const;
  Tensor any(const DimList& dims, bool keepdim = false) const;
  bool equal(const Tensor& other) const;
  bool allclose(const Tensor& other, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false) const;
  // Bounds as libtorch's clamp: an integral bound keeps an integer tensor integral, a floating one
  // makes the result float; NaN stays NaN; the gradient passes where x was not clamped.
  Tensor clamp(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt) const;
  Tensor clamp(const std::optional<Tensor>& min, const std::optional<Tensor>& max = std::nullopt) const;
  Tensor clamp_min(const Scalar& min) const;
  Tensor clamp_max(const Scalar& max) const;
  Tensor clamp_min(const Tensor& min) const;
  Tensor clamp_max(const Tensor& max) const;
  // value where mask (bool, broadcast to this shape) is true; value cast to this dtype.
  Tensor masked_fill(const Tensor& mask, const Scalar& value) const;
  Tensor masked_fill(const Tensor& mask, const Tensor& value) const;  // value: 0-d
  // The k largest (smallest) elements along dim and their int64 indices; sorted (ties: lower
  // index first, NaN above every number, as PyTorch's topk).
  std::tuple<Tensor, Tensor> topk(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) const;
  // The p-norm over all elements or over dims (p = 2, 1, inf, -inf, 0 or any other value).
  Tensor norm(const Scalar& p = 2) const;
  Tensor norm(const Scalar& p, const DimList& dims, bool keepdim = false) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor matmul(const Tensor& other) const;

  // In-place (not autocast). zero_, fill_, copy_ and mul_ refuse a tensor that requires grad
  // under grad mode. add_ and relu_ are differentiable as in PyTorch: on a non-leaf they rebase
  // its grad_fn onto the in-place op; on a leaf that requires grad (under grad mode) they raise;
  // writing a tensor that backward saved raises at backward (docs/MEMORY.md).
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& copy_(const Tensor& src);
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& relu_();
  Tensor& mul_(double value);
  Tensor& mul_(const Tensor& other);  // other broadcast to this shape, cast to this dtype
  // Not differentiable, as zero_/fill_: refuse a tensor that requires grad under grad mode.
  Tensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt);
  Tensor& masked_fill_(const Tensor& mask, const Scalar& value);

  // The in-place write count of the memory, shared with every view (StorageImpl::version).
  // Anything that writes a tensor's values in place outside the in-place ops bumps it.
  uint64_t version() const { return impl_->storage->version(); }
  void bump_version() const { impl_->storage->bump_version(); }

  std::shared_ptr<TensorImpl>& impl() { return impl_; }
  const std::shared_ptr<TensorImpl>& impl() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& a);
// Element-wise comparisons returning bool tensors, as in libtorch (not identity: see is_same).
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, double b);
Tensor operator!=(const Tensor& a, double b);
Tensor operator<(const Tensor& a, double b);
Tensor operator<=(const Tensor& a, double b);
Tensor operator>(const Tensor& a, double b);
Tensor operator>=(const Tensor& a, double b);

std::ostream& operator<<(std::ostream& os, const Tensor& t);

}  // namespace mixtrain
