// The fp8 casts and the scaled matrix product (ops/fp8.h); fp8_linear is in fp8_linear.cpp.
#include "mixtrain/ops/fp8.h"

#include "backends/fp8.h"
#include "ops/op_helpers.h"

namespace mixtrain {

using namespace ops;

namespace {

void check_one_element(const char* op, const Tensor& t, const char* what, DType dtype, const Tensor& like) {
  if (!t.defined()) return;
  MT_CHECK(t.numel() == 1 && t.dtype() == dtype && t.device() == like.device(), op, ": ", what,
           " must be a 1-element ", dtype, " tensor on ", like.device(), ", got ", describe(t));
}

// A matrix the kernels can read: a unit stride in one of its last two dims (a transposed view
// will do), else a contiguous copy.
Tensor unit_strided(const Tensor& t) {
  if (t.stride(1) == 1 || t.stride(0) == 1 || t.size(0) == 1 || t.size(1) == 1) return t;
  return t.contiguous();
}

}  // namespace

Tensor to_float8(const Tensor& input, DType dtype, const Tensor& scale, bool saturate, const Tensor& amax,
                 const Tensor& saturated) {
  check_defined("to_float8", input, "input");
  MT_CHECK(is_float8(dtype), "to_float8: expected float8_e4m3fn or float8_e5m2, got ", dtype);
  MT_CHECK(input.dtype() == kFloat32 || input.dtype() == kBFloat16 || input.dtype() == kFloat16,
           "to_float8: expected a float32, bfloat16 or float16 input, got ", describe(input),
           " (cast a float64 tensor to float32 first)");
  check_one_element("to_float8", scale, "scale", kFloat32, input);
  check_one_element("to_float8", amax, "amax", kFloat32, input);
  check_one_element("to_float8", saturated, "saturated", kInt64, input);
  NoGradGuard no_grad;
  const Tensor x = input.detach().contiguous();
  Tensor out = new_empty(x.shape(), x, dtype);
  backends::cast_to_fp8(x, x, out, dtype, scale, saturate, amax, saturated);
  return out;
}

Tensor scaled_mm(const Tensor& a_in, const Tensor& b_in, const Tensor& scale_a_in, const Tensor& scale_b_in,
                 DType out_dtype, const Tensor& bias_in) {
  Tensor a = a_in, b = b_in, scale_a = scale_a_in, scale_b = scale_b_in, bias = bias_in;
  std::optional<DType> out_arg = out_dtype;
  OpScope scope(OpId::scaled_mm, {&a, &b, &bias}, &out_arg);
  out_dtype = out_arg.value_or(out_dtype);
  const char* op = "scaled_mm";
  check_defined(op, a, "a");
  check_defined(op, b, "b");
  check_same_device(op, a, b);
  MT_CHECK(a.dim() == 2 && b.dim() == 2 && is_float8(a.dtype()) && is_float8(b.dtype()), op,
           ": expected two 2-D float8 matrices, got ", describe(a), " and ", describe(b));
  MT_CHECK(!(a.dtype() == kFloat8E5M2 && b.dtype() == kFloat8E5M2), op,
           ": two float8_e5m2 operands are not supported (cuBLASLt has no e5m2 x e5m2 GEMM); got ", describe(a),
           " and ", describe(b));
  MT_CHECK(a.size(1) == b.size(0), op, ": shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()),
           " cannot be multiplied (", a.size(1), " != ", b.size(0), ")");
  check_defined(op, scale_a, "scale_a");
  check_defined(op, scale_b, "scale_b");
  check_one_element(op, scale_a, "scale_a", kFloat32, a);
  check_one_element(op, scale_b, "scale_b", kFloat32, a);
  MT_CHECK(out_dtype == kFloat32 || out_dtype == kBFloat16 || out_dtype == kFloat16, op,
           ": out_dtype must be float32, bfloat16 or float16, got ", out_dtype);
  if (bias.defined()) {
    check_same_device(op, a, bias);
    const DType want = out_dtype == kFloat32 ? kBFloat16 : out_dtype;
    MT_CHECK(bias.dim() == 1 && bias.size(0) == b.size(1) && bias.dtype() == want, op, ": bias ", describe(bias),
             " must be [", b.size(1), "] ", want, " for a ", out_dtype, " output (PyTorch's rule)");
  }
  NoGradGuard no_grad;
  const Tensor bias_c = bias.defined() ? bias.detach().contiguous() : Tensor();
  Tensor out = new_empty({a.size(0), b.size(1)}, a, out_dtype);
  backends::scaled_mm(a, unit_strided(a.detach()), unit_strided(b.detach()), scale_a, scale_b, bias_c, out);
  return out;
}

}  // namespace mixtrain
