// Views: new shape and strides over the same storage. Their backward re-shapes the gradient.
#include <algorithm>
#include <numeric>

#include "ops/op_helpers.h"

namespace mixtrain {

using namespace ops;

namespace {

Tensor make_view(const Tensor& x, Shape shape, Shape strides, int64_t offset) {
  checked_numel(shape, "view");  // an expanded view's element count must not wrap either
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = x.impl()->storage;
  impl->offset = offset;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->dtype = x.dtype();
  impl->device = x.device();
  impl->is_view = true;
  return Tensor(std::move(impl));
}

Shape infer_shape(const char* op, const Shape& requested, int64_t numel, const Shape& from) {
  Shape shape = requested;
  int64_t infer = -1;
  Shape given;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      MT_CHECK(infer < 0, op, ": only one dimension can be -1 in ", shape_str(requested));
      infer = static_cast<int64_t>(i);
    } else {
      MT_CHECK(shape[i] >= 0, op, ": invalid size ", shape[i], " in ", shape_str(requested));
      given.push_back(shape[i]);
    }
  }
  const int64_t known = checked_numel(given, op);
  if (infer >= 0) {
    MT_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape_str(requested), " is invalid for input of shape ",
             shape_str(from));
    shape[infer] = numel / known;
  }
  MT_CHECK(shape_numel(shape) == numel, op, ": shape ", shape_str(requested), " is invalid for input of shape ",
           shape_str(from), " (", numel, " elements)");
  return shape;
}

}  // namespace

Tensor Tensor::view(const Shape& shape_in) const {
  const Shape shape = infer_shape("view", shape_in, numel(), this->shape());
  MT_CHECK(is_contiguous(), "view: input ", describe(*this), " is not contiguous; use reshape()");
  Tensor out = make_view(*this, shape, contiguous_strides(shape), storage_offset());
  const Shape from = this->shape();
  autograd::record("ViewBackward0", out, {this}, [from](const TensorList& g) { return TensorList{g[0].reshape(from)}; });
  return out;
}

Tensor Tensor::reshape(const Shape& shape) const {
  if (is_contiguous()) return view(shape);
  return contiguous().view(shape);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  const int64_t s = wrap_dim(start_dim, dim(), "flatten"), e = wrap_dim(end_dim, dim(), "flatten");
  MT_CHECK(s <= e, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim);
  Shape shape(this->shape().begin(), this->shape().begin() + s);
  int64_t n = 1;
  for (int64_t d = s; d <= e; ++d) n *= size(d);
  shape.push_back(n);
  shape.insert(shape.end(), this->shape().begin() + e + 1, this->shape().end());
  return reshape(shape);
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  const int64_t a = wrap_dim(dim0, dim(), "transpose"), b = wrap_dim(dim1, dim(), "transpose");
  Shape shape = this->shape(), strides = this->strides();
  std::swap(shape[a], shape[b]);
  std::swap(strides[a], strides[b]);
  Tensor out = make_view(*this, shape, strides, storage_offset());
  autograd::record("TransposeBackward0", out, {this}, [a, b](const TensorList& g) { return TensorList{g[0].transpose(a, b)}; });
  return out;
}

Tensor Tensor::t() const {
  MT_CHECK(dim() <= 2, "t: expects a tensor of at most 2 dimensions, got ", describe(*this));
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::permute(const Shape& dims) const {
  MT_CHECK(static_cast<int64_t>(dims.size()) == dim(), "permute: ", dims.size(), " dims given for ", describe(*this));
  Shape shape(dims.size()), strides(dims.size()), inverse(dims.size());
  std::vector<bool> used(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], dim(), "permute");
    MT_CHECK(!used[d], "permute: dimension ", d, " repeats in ", shape_str(dims));
    used[d] = true;
    shape[i] = size(d);
    strides[i] = stride(d);
    inverse[d] = static_cast<int64_t>(i);
  }
  Tensor out = make_view(*this, shape, strides, storage_offset());
  autograd::record("PermuteBackward0", out, {this}, [inverse](const TensorList& g) { return TensorList{g[0].permute(inverse)}; });
  return out;
}

Tensor Tensor::slice(int64_t dim_in, int64_t start, int64_t end, int64_t step) const {
  const int64_t d = wrap_dim(dim_in, dim(), "slice");
  MT_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = size(d);
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape shape = this->shape(), strides = this->strides();
  shape[d] = (end - start + step - 1) / step;
  strides[d] *= step;
  Tensor out = make_view(*this, shape, strides, storage_offset() + start * stride(d));
  const Shape from = this->shape();
  autograd::record("SliceBackward0", out, {this}, [from, d, start, end, step](const TensorList& g) {
    Tensor full = zeros(from, g[0].options());
    full.slice(d, start, end, step).copy_(g[0]);
    return TensorList{full};
  });
  return out;
}

Tensor Tensor::narrow(int64_t dim_in, int64_t start, int64_t length) const {
  const int64_t d = wrap_dim(dim_in, dim(), "narrow");
  MT_CHECK(start >= 0 && length >= 0 && start + length <= size(d), "narrow: range [", start, ", ", start + length,
           ") is out of bounds for dimension ", d, " of ", describe(*this));
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t dim_in, int64_t index) const {
  const int64_t d = wrap_dim(dim_in, dim(), "select");
  const int64_t n = size(d);
  MT_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dimension ", d, " of ", describe(*this));
  if (index < 0) index += n;
  return slice(d, index, index + 1).squeeze(d);
}

Tensor Tensor::unsqueeze(int64_t dim_in) const {
  const int64_t d = wrap_dim(dim_in, dim() + 1, "unsqueeze");
  Shape shape = this->shape(), strides = this->strides();
  const int64_t st = d < dim() ? stride(d) * size(d) : 1;
  shape.insert(shape.begin() + d, 1);
  strides.insert(strides.begin() + d, st);
  Tensor out = make_view(*this, shape, strides, storage_offset());
  const Shape from = this->shape();
  autograd::record("UnsqueezeBackward0", out, {this}, [from](const TensorList& g) { return TensorList{g[0].reshape(from)}; });
  return out;
}

namespace {
// x without the size-1 dims of `drop` (as one view and one node).
Tensor squeeze_dims(const Tensor& x, const std::vector<bool>& drop) {
  Shape shape, strides;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (drop[static_cast<size_t>(d)] && x.size(d) == 1) continue;
    shape.push_back(x.size(d));
    strides.push_back(x.stride(d));
  }
  if (static_cast<int64_t>(shape.size()) == x.dim()) return x;
  Tensor out = make_view(x, shape, strides, x.storage_offset());
  const Shape from = x.shape();
  autograd::record("SqueezeBackward0", out, {&x}, [from](const TensorList& g) { return TensorList{g[0].reshape(from)}; });
  return out;
}
}  // namespace

Tensor Tensor::squeeze(int64_t dim_in) const {
  const int64_t d = wrap_dim(dim_in, dim(), "squeeze");
  if (dim() == 0) return *this;  // a 0-d tensor's only dim is size 1 already
  std::vector<bool> drop(static_cast<size_t>(dim()), false);
  drop[static_cast<size_t>(d)] = true;
  return squeeze_dims(*this, drop);
}

Tensor Tensor::squeeze() const { return squeeze_dims(*this, std::vector<bool>(static_cast<size_t>(dim()), true)); }

Tensor Tensor::expand(const Shape& shape_in) const {
  const int64_t nd = static_cast<int64_t>(shape_in.size());
  MT_CHECK(nd >= dim(), "expand: cannot expand ", describe(*this), " to fewer dimensions ", shape_str(shape_in));
  Shape shape(nd), strides(nd);
  for (int64_t i = nd - 1, j = dim() - 1; i >= 0; --i, --j) {
    const int64_t have = j >= 0 ? size(j) : 1;
    const int64_t want = shape_in[i] == -1 ? have : shape_in[i];
    MT_CHECK(want >= 0, "expand: invalid size ", shape_in[i], " in ", shape_str(shape_in));
    MT_CHECK(have == want || have == 1, "expand: cannot expand ", describe(*this), " to ", shape_str(shape_in),
             " (dimension ", i, ": ", have, " vs ", want, ")");
    shape[i] = want;
    strides[i] = (j >= 0 && have == want) ? stride(j) : 0;
  }
  if (shape == this->shape()) return *this;
  Tensor out = make_view(*this, shape, strides, storage_offset());
  const Shape from = this->shape();
  autograd::record("ExpandBackward0", out, {this}, [from](const TensorList& g) { return TensorList{sum_to(g[0], from)}; });
  return out;
}

Tensor reshape(const Tensor& x, const Shape& shape) { return x.reshape(shape); }
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) { return x.transpose(dim0, dim1); }
Tensor permute(const Tensor& x, const Shape& dims) { return x.permute(dims); }
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) { return x.slice(dim, start, end, step); }
Tensor expand(const Tensor& x, const Shape& shape) { return x.expand(shape); }
Tensor squeeze(const Tensor& x) { return x.squeeze(); }
Tensor squeeze(const Tensor& x, int64_t dim) { return x.squeeze(dim); }
Tensor unsqueeze(const Tensor& x, int64_t dim) { return x.unsqueeze(dim); }

}  // namespace mixtrain
