#pragma once
// FP8 ops (docs/FP8.md): the scaled cast with its statistics, the scaled matrix product and the
// FP8 linear layer (forward and backward in fp8) that amp's FP8 autocast runs nn::Linear with.
// A scaled fp8 tensor is (data, scale_inv): its value is data * scale_inv = data / scale.
#include <cstdint>

#include "mixtrain/core/tensor.h"

namespace mixtrain {

// input * scale cast to `dtype` (float8_e4m3fn or float8_e5m2), rounded to nearest even. input:
// fp32, fp16 or bf16 (fp64 is refused: cast it first). scale: undefined (none) or a 1-element fp32
// tensor on input's device. saturate: values beyond the format's max become +-max (the recipes'
// cast; e4m3fn always saturates, e5m2 otherwise overflows to inf); NaN stays NaN. In the same pass,
// when given, amax (1-element fp32) becomes max(amax, max |input|) (NaN ignored) and saturated
// (1-element int64) grows by the count of |input * scale| > max (inf included). Not
// differentiable: the result has no history. The plain cast is input.to(dtype).
Tensor to_float8(const Tensor& input, DType dtype, const Tensor& scale = Tensor(), bool saturate = true,
                 const Tensor& amax = Tensor(), const Tensor& saturated = Tensor());

// (a @ b) * scale_a * scale_b (+ bias) as PyTorch's torch._scaled_mm: a [m, k] and b [k, n] fp8
// (e4m3fn or e5m2 each, not both e5m2), scale_a and scale_b 1-element fp32 (inverse scales, the
// dequantisation factors), exact products accumulated in fp32, the output in out_dtype (fp32, bf16
// or fp16) rounded once. bias [n]: bf16 or fp16, of out_dtype when that is half, bf16 for an fp32
// output. On CUDA: cuBLASLt's fp8 GEMM (compute capability 8.9 or later; k and n multiples of 16,
// m too on the GPU's TN layout), operands copied into that layout where they are not in it. On
// the CPU: the exact emulation (decoded to bf16, fp32 sums). Not differentiable: fp8_linear has the
// backward of the FP8 layer.
Tensor scaled_mm(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                 DType out_dtype = kBFloat16, const Tensor& bias = Tensor());

// A scaled fp8 tensor.
struct Float8Tensor {
  Tensor data;       // float8_e4m3fn or float8_e5m2
  Tensor scale_inv;  // 1-element fp32: value = data * scale_inv
};

// How fp8_linear casts (amp::Fp8Recipe decides it).
struct Fp8LinearConfig {
  DType forward_dtype = kFloat8E4M3FN;  // input and weight
  DType backward_dtype = kFloat8E5M2;   // grad output: e5m2 (HYBRID) or e4m3fn (E4M3)
  bool current_scaling = false;         // each tensor's scale from its own amax (tensorwise), else state.scale
  int margin = 0;                       // current scaling: scale = max / amax / 2^margin
  DType out_dtype = kBFloat16;          // the output's dtype (bias must be in it)
};

// The scaling state of one layer, one slot per cast tensor: 0 input, 1 weight, 2 grad output.
struct Fp8LinearState {
  Tensor scale;      // fp32 [3]: data = fp8(x * scale). Read (delayed scaling) or written (current)
  Tensor scale_inv;  // fp32 [3]: 1 / scale, what the GEMMs multiply by
  Tensor amax;       // fp32 [3]: max |x| seen since the last update, accumulated
  Tensor saturated;  // int64 [3]: values the casts clamped to +-max since the last update, accumulated
  Float8Tensor weight;  // optional: the weight already cast with slot 1 (a per-step cache); else cast here
};

// The weight cast as fp8_linear makes it (slot 1 of `state`, its statistics recorded), for a
// caller that caches it.
Float8Tensor fp8_cast_weight(const Tensor& weight, const Fp8LinearState& state, const Fp8LinearConfig& config);

// linear(input, weight, bias) in fp8: input [..., in] (fp32, bf16 or fp16) and weight [out, in]
// cast to config.forward_dtype with their slots' scales, one scaled_mm into config.out_dtype with
// the bias in its epilogue. Backward: the output's gradient cast to config.backward_dtype (slot
// 2), then input grad = g x W (into input's dtype) and weight grad = g^T x X (into weight's dtype)
// as scaled_mm over the saved fp8 copies, and bias grad = sum(g). Every cast saturates and adds to
// its slot's amax and saturation count.
Tensor fp8_linear(const Tensor& input, const Tensor& weight, const Tensor& bias, const Fp8LinearState& state,
                  const Fp8LinearConfig& config);

}  // namespace mixtrain
