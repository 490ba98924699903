// norm: the p-norm of a tensor over dims (torch.norm / torch.linalg.vector_norm). Composed of
// elementwise ops and reductions, with one node whose backward is PyTorch's
// (linalg_vector_norm_backward): the subgradient 0 where the norm is 0, and for p = +-inf the
// gradient split evenly among the elements that reach the norm.
#include <algorithm>
#include <cmath>

#include "ops/op_helpers.h"

namespace mixtrain {

using namespace ops;

namespace {

// max (min) of t over dims (all when empty): the kept dims first, the reduced ones flattened last.
Tensor extreme(const Tensor& t, std::vector<int64_t> dims, bool keepdim, bool is_max) {
  if (t.dim() == 0) return t;  // one element
  if (dims.empty())
    for (int64_t d = 0; d < t.dim(); ++d) dims.push_back(d);
  for (int64_t& d : dims) d = wrap_dim(d, t.dim(), "norm");
  std::sort(dims.begin(), dims.end());
  Shape perm, kept_shape, keep_shape;
  for (int64_t d = 0; d < t.dim(); ++d) {
    const bool reduced = std::binary_search(dims.begin(), dims.end(), d);
    keep_shape.push_back(reduced ? 1 : t.size(d));
    if (!reduced) perm.push_back(d), kept_shape.push_back(t.size(d));
  }
  perm.insert(perm.end(), dims.begin(), dims.end());
  Shape flat = kept_shape;
  flat.push_back(-1);
  const Tensor rows = t.permute(perm).reshape(flat);
  const Tensor r = is_max ? max(rows, -1) : min(rows, -1);
  return keepdim ? r.reshape(keep_shape) : r;
}

Tensor sign(const Tensor& t) { return sub(gt(t, zeros({}, t.options())).to(t.dtype()), lt(t, zeros({}, t.options())).to(t.dtype())); }

// What a reduction over dims without keepdim removed, put back as size-1 dims.
Tensor unsqueeze_reduced(const Tensor& r, const Shape& keep_shape) { return r.reshape(keep_shape); }

}  // namespace

Tensor norm(const Tensor& x_in, const Scalar& p_s, const std::vector<int64_t>& dims, bool keepdim) {
  const char* op = "norm";
  Tensor x = x_in;
  OpScope scope(OpId::norm, {&x});
  check_defined(op, x, "input");
  check_floating(op, x);
  const double p = p_s.toDouble();
  MT_CHECK(!std::isnan(p), op, ": p must be a number, got nan");
  Shape keep_shape;  // x's shape with 1 in the reduced dims
  {
    std::vector<bool> reduced(static_cast<size_t>(x.dim()), dims.empty());
    for (int64_t d : dims) {
      const int64_t w = wrap_dim(d, x.dim(), op);
      if (x.dim() > 0) reduced[static_cast<size_t>(w)] = true;
    }
    for (int64_t d = 0; d < x.dim(); ++d) keep_shape.push_back(reduced[static_cast<size_t>(d)] ? 1 : x.size(d));
  }
  // Half inputs in fp32, the result rounded once, as PyTorch's reduction does.
  const DType acc = is_half(x.dtype()) ? kFloat32 : x.dtype();
  Tensor out;
  {
    NoGradGuard no_grad;
    const Tensor xa = x.detach().to(acc);
    Tensor r;
    if (p == 2.0) r = sqrt(sum(square(xa), dims, keepdim));
    else if (p == 1.0) r = sum(abs(xa), dims, keepdim);
    else if (std::isinf(p)) r = extreme(abs(xa), dims, keepdim, p > 0);
    else if (p == 0.0) r = sum(ne(xa, zeros({}, xa.options())).to(acc), dims, keepdim);
    else r = pow(sum(pow(abs(xa), p), dims, keepdim), 1.0 / p);
    out = r.dtype() == x.dtype() ? r : r.to(x.dtype());
  }
  if (autograd::needs_grad({&x})) {
    const autograd::SavedTensor x_s = autograd::saved(x, "input 0"), out_s = autograd::saved(out, "output 0");
    autograd::record("NormBackward0", out, {&x}, [x_s, out_s, p, acc, keep_shape](const TensorList& g) {
      const Tensor& xt = x_s;
      const Tensor self = xt.to(acc);
      const Tensor n = unsqueeze_reduced(out_s.unpack().to(acc), keep_shape);
      const Tensor grad = unsqueeze_reduced(g[0].to(acc), keep_shape);
      const Tensor zero = zeros({}, self.options());
      Tensor gx;
      if (p == 0.0) {
        gx = zeros_like(self);
      } else if (p == 1.0) {
        gx = mul(sign(self), grad);
      } else if (p == 2.0) {
        gx = mul(grad, where(eq(n, zero), zero, div(self, n)));
      } else if (std::isinf(p)) {
        const Tensor a = abs(self);
        const Tensor hit = where(eq(a, n), ones({}, kBool), ne(a, a)).to(acc);  // the extremes, and NaNs
        std::vector<int64_t> all_dims;
        for (int64_t d = 0; d < self.dim(); ++d)
          if (keep_shape[static_cast<size_t>(d)] == 1 && self.size(d) != 1) all_dims.push_back(d);
        const Tensor count = all_dims.empty() ? hit : sum(hit, all_dims, true);
        gx = mul(sign(self), mul(div(grad, count), hit));
      } else {
        // |x|^(p-1) sign(x) / norm^(p-1), 0 where the norm is 0 (p >= 1) or x is 0 (p < 1).
        const Tensor a = abs(self);
        if (p < 1.0) {
          const Tensor scaled = where(eq(self, zero), zero, mul(sign(self), pow(a, p - 1.0)));
          gx = mul(mul(scaled, grad), pow(n, 1.0 - p));
        } else {
          const Tensor scaled = p < 2.0 ? mul(sign(self), pow(a, p - 1.0)) : mul(self, pow(a, p - 2.0));
          gx = mul(scaled, where(eq(n, zero), zero, div(grad, pow(n, p - 1.0))));
        }
      }
      return TensorList{gx.dtype() == xt.dtype() ? gx : gx.to(xt.dtype())};
    });
  }
  return out;
}

Tensor Tensor::norm(const Scalar& p) const { return mixtrain::norm(*this, p); }
Tensor Tensor::norm(const Scalar& p, const DimList& dims, bool keepdim) const {
  return mixtrain::norm(*this, p, dims.vec(), keepdim);
}

}  // namespace mixtrain
