// Tensor accessors and the parts of the handle that need no op. Methods that run ops (to_vector,
// item and the math) live in src/ops/tensor_methods.cpp, backward() in src/engine/engine.cpp.
#include "mixtrain/core/tensor.h"

#include <sstream>

#include "mixtrain/base/dtype_traits.h"
#include "mixtrain/base/error.h"

namespace mixtrain {

namespace {
const TensorImpl& checked(const std::shared_ptr<TensorImpl>& impl) {
  MT_CHECK(impl != nullptr, "Tensor: use of an undefined tensor");
  return *impl;
}
}  // namespace

Tensor Tensor::empty(const Shape& shape, const TensorOptions& options, MemoryFormat format) {
  Tensor t = empty(shape, options);
  if (format == MemoryFormat::ChannelsLast) t.impl()->strides = channels_last_strides(shape);
  return t;
}

Tensor Tensor::empty(const Shape& shape, const TensorOptions& options) {
  const size_t nbytes = checked_nbytes(shape, element_size(options.dtype()), "empty");
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = options.dtype();
  impl->device = options.device();
  MT_CHECK(!options.pinned_memory() || options.device().is_cpu(), "empty: pinned_memory(true) is for CPU tensors, ",
           "got device ", options.device(), " for shape ", shape_str(shape));
  impl->storage = std::make_shared<StorageImpl>(nbytes, options.device(), options.pinned_memory());
  impl->requires_grad = options.requires_grad();
  MT_CHECK(!impl->requires_grad || is_floating(impl->dtype), "requires_grad: only floating tensors can require ",
           "gradients, got ", impl->dtype);
  return Tensor(std::move(impl));
}

bool Tensor::is_pinned() const {
  const TensorImpl& impl = checked(impl_);
  return impl.storage && impl.storage->pinned();
}

const Shape& Tensor::shape() const { return checked(impl_).shape; }
const Shape& Tensor::strides() const { return checked(impl_).strides; }
int64_t Tensor::dim() const { return static_cast<int64_t>(checked(impl_).shape.size()); }
int64_t Tensor::numel() const { return shape_numel(checked(impl_).shape); }
DType Tensor::dtype() const { return checked(impl_).dtype; }
Device Tensor::device() const { return checked(impl_).device; }
int64_t Tensor::storage_offset() const { return checked(impl_).offset; }
TensorOptions Tensor::options() const { return TensorOptions().dtype(dtype()).device(device()); }

int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, dim(), "stride")]; }

bool Tensor::is_contiguous(MemoryFormat format) const {
  if (format == MemoryFormat::Contiguous) return is_contiguous();
  const auto& t = checked(impl_);
  return t.shape.size() == 4 && strides_match(t.shape, t.strides, channels_last_strides(t.shape));
}

bool Tensor::same_dense_layout(const Tensor& other) const {
  if (shape() != other.shape()) return false;
  for (MemoryFormat f : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast})
    if (is_contiguous(f) && other.is_contiguous(f)) return true;
  return false;
}

MemoryFormat Tensor::suggest_memory_format() const {
  const auto& t = checked(impl_);
  if (t.shape.size() != 4) return MemoryFormat::Contiguous;
  // Strides as a channels-last allocation sets them (size-1 dims included) settle a layout that
  // both would fit, as a one-channel image's does; otherwise the memory order decides.
  if (t.strides == channels_last_strides(t.shape) && t.strides != contiguous_strides(t.shape))
    return MemoryFormat::ChannelsLast;
  return !is_contiguous() && is_contiguous(MemoryFormat::ChannelsLast) ? MemoryFormat::ChannelsLast
                                                                       : MemoryFormat::Contiguous;
}

bool Tensor::is_contiguous() const {
  const auto& t = checked(impl_);
  int64_t expected = 1;
  for (size_t i = t.shape.size(); i-- > 0;) {
    if (t.shape[i] == 1) continue;
    if (t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  const auto& t = checked(impl_);
  MT_CHECK(!t.device.is_meta(), "data_ptr: ", summary(), " is on the meta device, which holds shapes and dtypes ",
           "but no data (memory::dry_run); there is no pointer to read");
  return static_cast<char*>(t.storage->data()) + t.offset * static_cast<int64_t>(element_size(t.dtype));
}

template <class T>
T* Tensor::data_ptr() const {
  MT_CHECK(dtype() == dtype_of<T>::value, "data_ptr: tensor has dtype ", dtype(), " but ",
           dtype_of<T>::value, " was requested");
  return static_cast<T*>(raw_data());
}

#define MT_INSTANTIATE_ACCESSORS(T) template T* Tensor::data_ptr<T>() const;
MT_INSTANTIATE_ACCESSORS(float)
MT_INSTANTIATE_ACCESSORS(double)
MT_INSTANTIATE_ACCESSORS(Half)
MT_INSTANTIATE_ACCESSORS(BFloat16)
MT_INSTANTIATE_ACCESSORS(int64_t)
MT_INSTANTIATE_ACCESSORS(int32_t)
MT_INSTANTIATE_ACCESSORS(bool)
#undef MT_INSTANTIATE_ACCESSORS

std::string Tensor::summary() const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  os << "Tensor" << shape_str(shape()) << ' ' << dtype() << ' ' << device();
  return os.str();
}


bool Tensor::requires_grad() const { return checked(impl_).requires_grad; }

Tensor& Tensor::set_requires_grad(bool value) {
  MT_CHECK(!value || is_floating(dtype()), "set_requires_grad: only floating tensors can require gradients, got ",
           dtype());
  MT_CHECK(value || is_leaf(), "set_requires_grad(false): ", summary(),
           " is not a leaf; use detach() to take a tensor out of the graph");
  impl_->requires_grad = value;
  return *this;
}

bool Tensor::is_leaf() const { return checked(impl_).grad_fn == nullptr; }

Tensor Tensor::grad() const {
  const auto& t = checked(impl_);
  return t.grad ? Tensor(t.grad) : Tensor();
}

void Tensor::set_grad(const Tensor& grad) {
  checked(impl_);
  if (grad.defined()) {
    MT_CHECK(grad.shape() == shape() && grad.dtype() == dtype() && grad.device() == device(),
             "set_grad: gradient ", grad.summary(), " does not match tensor ", summary());
  }
  impl_->grad = grad.impl();
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const { return checked(impl_).grad_fn; }

Tensor Tensor::detach() const {
  const auto& t = checked(impl_);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.storage;
  impl->offset = t.offset;
  impl->shape = t.shape;
  impl->strides = t.strides;
  impl->dtype = t.dtype;
  impl->device = t.device;
  return Tensor(std::move(impl));
}

}  // namespace mixtrain
