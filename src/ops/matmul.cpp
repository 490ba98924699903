// Matrix products: matmul (PyTorch's 1-D/2-D/batched rules), bmm, linear and linear_relu. All
// but the linears reduce to one recorded primitive, mm over 2-D or 3-D operands, whose backward
// is two more products; the linears record their own node, with the bias and the ReLU in the
// GEMM's epilogue.
#include "backends/elementwise.h"
#include "backends/matmul.h"
#include "ops/op_helpers.h"

namespace mixtrain {

using namespace ops;
using backends::GemmEpilogue;
using backends::UnaryOp;

namespace {

void check_pair(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, a, "first input");
  check_defined(op, b, "second input");
  check_same_device(op, a, b);
  check_floating(op, a);
  MT_CHECK(!is_float8(a.dtype()) && !is_float8(b.dtype()), op, ": float8 operands multiply through scaled_mm, ",
           "with their scales; got ", describe(a), " and ", describe(b));
  MT_CHECK(a.dtype() == b.dtype(), op, ": expected both inputs to have the same dtype, got ", describe(a), " and ",
           describe(b), " (cast one, or run under autocast)");
}

// a: [m, k] or [B, m, k]; b: [k, n] or [B, k, n] (same B). Records its backward.
Tensor mm(const char* op, const Tensor& a, const Tensor& b) {
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  MT_CHECK(b.size(-2) == k, op, ": shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()),
           " cannot be multiplied (", k, " != ", b.size(-2), ")");
  Shape out_shape = a.dim() == 3 ? Shape{a.size(0), m, n} : Shape{m, n};
  Tensor out = new_empty(out_shape, a);
  backends::gemm(a, gemm_ready(a), false, gemm_ready(b), false, out, Tensor(), backends::GemmEpilogue::None);
  if (autograd::needs_grad({&a, &b})) {
    const autograd::SavedTensor a_s = b.requires_grad() ? autograd::saved(a, "input 0") : autograd::SavedTensor();
    const autograd::SavedTensor b_s = a.requires_grad() ? autograd::saved(b, "input 1") : autograd::SavedTensor();
    autograd::record(a.dim() == 3 ? "BmmBackward0" : "MmBackward0", out, {&a, &b}, [a_s, b_s, op](const TensorList& g) {
      return TensorList{b_s.defined() ? mm(op, g[0], b_s.unpack().transpose(-1, -2)) : Tensor(),
                        a_s.defined() ? mm(op, a_s.unpack().transpose(-1, -2), g[0]) : Tensor()};
    });
  }
  return out;
}

// grad_out masked where the ReLU clamped. The derivative is read from the saved output: out > 0
// exactly where the pre-activation is > 0, so relu's own backward kernel gives the same bits as on
// the unfused path.
Tensor relu_backward_from_output(const Tensor& out, const Tensor& grad_out) {
  Tensor grad = new_empty(grad_out.shape(), grad_out);
  backends::unary_backward(grad_out, UnaryOp::Relu, out, Tensor(), grad_out, grad, 0.0);
  return grad;
}

// linear and linear_relu: x [..., in] @ w^T (+ b), the activation in the GEMM's epilogue, one
// recorded node whose backward undoes the activation first, then the product.
Tensor linear_with_epilogue(const char* op, const Tensor& x_in, const Tensor& w_in, const Tensor& b_in,
                            GemmEpilogue epilogue) {
  Tensor x = x_in, w = w_in, b = b_in;
  // linear_relu is linear to autocast: one policy entry decides both, and relu (Passthrough)
  // would not cast what linear returns.
  OpScope scope(OpId::linear, {&x, &w, &b});
  check_pair(op, x, w);
  MT_CHECK(w.dim() == 2 && x.dim() >= 1 && x.size(-1) == w.size(1), op, ": input ", describe(x),
           " does not match weight ", describe(w), " (expected input [..., ", w.dim() == 2 ? w.size(1) : -1, "])");
  if (b.defined()) {
    check_same_device(op, x, b);
    MT_CHECK(b.dim() == 1 && b.size(0) == w.size(0) && b.dtype() == x.dtype(), op, ": bias ", describe(b),
             " does not match weight ", describe(w));
  }
  const int64_t in = w.size(1), out_features = w.size(0);
  Tensor x2 = x.reshape({-1, in});
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  Tensor out = new_empty({x2.size(0), out_features}, x);
  backends::gemm(x, gemm_ready(x2), false, gemm_ready(w), true, out, b, epilogue);
  if (autograd::needs_grad({&x2, &w, &b})) {
    const autograd::SavedTensor x_s = w.requires_grad() ? autograd::saved(x2, "input 0 (input)") : autograd::SavedTensor();
    const autograd::SavedTensor w_s = x2.requires_grad() ? autograd::saved(w, "input 1 (weight)") : autograd::SavedTensor();
    const autograd::SavedTensor y_s =
        epilogue == GemmEpilogue::Relu ? autograd::saved(out, "output 0") : autograd::SavedTensor();
    const bool gb = b.defined() && b.requires_grad();
    const char* node = epilogue == GemmEpilogue::Relu ? "LinearReluBackward0" : "LinearBackward0";
    autograd::record(node, {&out}, {&x2, &w, &b}, [x_s, w_s, y_s, gb, op](const TensorList& g) {
      const Tensor go = y_s.defined() ? relu_backward_from_output(y_s, g[0]) : g[0];
      TensorList r(3);
      if (w_s.defined()) r[0] = mm(op, go, w_s);
      if (x_s.defined()) r[1] = mm(op, go.transpose(0, 1), x_s);
      if (gb) r[2] = sum(go, {0});
      return r;
    });
  }
  return x.dim() == 2 ? out : out.reshape(out_shape);  // no view node for a matrix input
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  OpScope scope(OpId::matmul, {&a, &b});
  check_pair("matmul", a, b);
  MT_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both inputs need at least one dimension, got ", describe(a),
           " and ", describe(b));
  if (a.dim() == 1 && b.dim() == 1) return mm("matmul", a.reshape({1, -1}), b.reshape({-1, 1})).reshape({});
  if (a.dim() == 1) return matmul(a.unsqueeze(0), b).squeeze(-2);
  if (b.dim() == 1) {
    Shape out = a.shape();
    out.pop_back();
    return matmul(a, b.reshape({-1, 1})).reshape(out);
  }
  if (a.dim() == 2 && b.dim() == 2) return mm("matmul", a, b);
  MT_CHECK(a.size(-1) == b.size(-2), "matmul: shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()),
           " cannot be multiplied (", a.size(-1), " != ", b.size(-2), ")");
  if (b.dim() == 2) {  // fold a's batch dims into its rows: one big GEMM
    Shape out = a.shape();
    out.back() = b.size(1);
    return mm("matmul", a.reshape({-1, a.size(-1)}), b).reshape(out);
  }
  // Broadcast the batch dims, then one batched product.
  const Shape ab(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  const Shape batch = broadcast_shapes(ab, bb, "matmul");
  Shape ae = batch, be = batch, out = batch;
  ae.insert(ae.end(), {a.size(-2), a.size(-1)});
  be.insert(be.end(), {b.size(-2), b.size(-1)});
  out.insert(out.end(), {a.size(-2), b.size(-1)});
  const int64_t nb = shape_numel(batch);
  return mm("matmul", a.expand(ae).reshape({nb, a.size(-2), a.size(-1)}), b.expand(be).reshape({nb, b.size(-2), b.size(-1)}))
      .reshape(out);
}

Tensor bmm(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  OpScope scope(OpId::bmm, {&a, &b});
  check_pair("bmm", a, b);
  MT_CHECK(a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0), "bmm: expected [B, m, k] and [B, k, n], got ",
           describe(a), " and ", describe(b));
  return mm("bmm", a, b);
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return linear_with_epilogue("linear", x, weight, bias, GemmEpilogue::None);
}

Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return linear_with_epilogue("linear_relu", x, weight, bias, GemmEpilogue::Relu);
}

Tensor dot(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  OpScope scope(OpId::dot, {&a, &b});
  check_pair("dot", a, b);
  MT_CHECK(a.dim() == 1 && b.dim() == 1 && a.size(0) == b.size(0), "dot: expected two 1-D tensors of the same length, got ",
           describe(a), " and ", describe(b));
  // A [1, k] x [k, 1] product: the GEMM's fp32 accumulation for half inputs, and its backward.
  return mm("dot", a.reshape({1, -1}), b.reshape({-1, 1})).reshape({});
}

}  // namespace mixtrain
