// Differentiable in-place ops (relu_, add_): they write self, bump its memory's version and,
// when autograd records, rebase self's grad_fn onto a node whose input edge is self's previous
// history. A leaf that requires grad may not be written under grad mode (PyTorch's rule), and
// the saved-tensor version check catches a write to anything an earlier node saved.
#include "backends/elementwise.h"
#include "mixtrain/ops/dispatch.h"
#include "ops/op_helpers.h"

namespace mixtrain {

using namespace ops;
using backends::BinaryOp;
using backends::UnaryOp;

namespace ops {

void check_writable_inplace(const char* op, const Tensor& self) {
  check_defined(op, self, "self");
  check_floating(op, self);
  // An expanded tensor holds one element in many places: writing it in place would race.
  for (int64_t d = 0; d < self.dim(); ++d)
    MT_CHECK(self.stride(d) != 0 || self.size(d) <= 1, op, ": unsupported operation: more than one element of ",
             describe(self), " refers to a single memory location (an expanded tensor); clone() it first");
  autograd::check_inplace_autograd(op, self);
}

}  // namespace ops

Tensor& Tensor::relu_() {
  Tensor& self = *this;
  HookExcludeGuard not_autocast;  // in-place ops keep self's dtype, as in PyTorch
  check_writable_inplace("relu_", self);
  backends::unary(self, UnaryOp::Relu, self, self, 0.0);
  self.bump_version();
  if (autograd::needs_grad({&self})) {
    // relu(x) > 0 exactly where x > 0, so the output (all that is left) gives relu's gradient.
    const autograd::SavedTensor y_s = autograd::saved(self, "output 0 (self after relu_)");
    autograd::record("ReluBackward0", self, {&self}, [y_s](const TensorList& g) {
      Tensor gx = new_empty_preserving(g[0].shape(), g[0]);
      backends::unary_backward(g[0], UnaryOp::Relu, y_s, Tensor(), g[0], gx, 0.0);
      return TensorList{gx};
    });
  }
  return self;
}

Tensor& relu_(Tensor& x) { return x.relu_(); }

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  Tensor& self = *this;
  HookExcludeGuard not_autocast;
  check_writable_inplace("add_", self);
  check_defined("add_", other, "other");
  check_same_device("add_", self, other);
  MT_CHECK(broadcast_shapes(self.shape(), other.shape(), "add_") == self.shape(), "add_: ", describe(other),
           " does not broadcast to self's shape ", shape_str(self.shape()));
  // Cast and scaled in self's dtype (differentiable: other's gradient goes back through both).
  Tensor o = other.dtype() == self.dtype() ? other : other.to(self.dtype());
  if (alpha != 1.0) o = mul(o, alpha);
  {
    NoGradGuard no_grad;  // a broadcast view for the kernel only
    const Tensor ob = o.shape() == self.shape() ? o : o.detach().expand(self.shape());
    backends::binary(self, BinaryOp::Add, self, ob, self);
  }
  self.bump_version();
  if (autograd::needs_grad({&self, &o})) {
    const Shape so = o.shape();
    autograd::record("AddBackward0", {&self}, {&self, &o}, [so](const TensorList& g) {
      return TensorList{g[0], sum_to(g[0], so)};
    });
  }
  return self;
}

}  // namespace mixtrain
