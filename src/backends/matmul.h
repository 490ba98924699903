#pragma once
// The matmul family's kernel (ops/matmul.cpp: matmul, linear, linear + ReLU).
#include "backends/kernel.h"
#include "backends/kernel_types.h"

namespace mixtrain::backends {

// out = epilogue(op(a) @ op(b) (+ bias broadcast over rows)). a, b: [batch?, m, k] matrices
// whose last two dims have one unit stride (either order). Half inputs: fp32 accumulate, bias
// and epilogue in fp32, round once (CUDA's fallback when cuBLASLt has no fused algorithm rounds
// the product, then adds the bias). Relu matches unary(Relu), x <= 0 ? 0 : x, for every number;
// a NaN pre-activation may come out as 0 on CUDA (cuBLASLt's ReLU is max(x, 0)).
MT_KERNEL(matmul, gemm,
          void(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& out, const Tensor& bias,
               GemmEpilogue epilogue));

}  // namespace mixtrain::backends
