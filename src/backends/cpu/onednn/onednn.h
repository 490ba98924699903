#pragma once
// oneDNN as the CPU backend's engine for GEMMs and convolutions (docs/CPU.md, "oneDNN: which op
// runs where and how to turn it off"). The backend's kernels (cpu/matmul.cpp, cpu/conv.cpp) offer
// each call here first; a call oneDNN does not take (switched off, below the size threshold, a
// dtype or layout it lacks, a library built without it) returns false and runs on the backend's
// own kernels as before. No oneDNN header crosses this one: it is included by code built
// without oneDNN too.
#include <cstdint>
#include <string>

#include "backends/kernel_types.h"
#include "mixtrain/core/tensor.h"

namespace mixtrain::backends::cpu {

// Off: own kernels only. Sized: oneDNN from the size thresholds below up (the default). All:
// oneDNN at every size it supports (tests run the whole matmul/conv suites through it).
enum class OneDnnMode { Off, Sized, All };

// The mode in force: Off in a library built without oneDNN; else the test override, else the
// environment's MIXTRAIN_ONEDNN: unset or 1 Sized, 0 Off, "all" All (anything else is an Error).
OneDnnMode onednn_mode();
OneDnnMode parse_onednn_mode(const char* value);
// -1: back to the environment's choice; 0, 1, 2: Off, Sized, All (tests compare the paths).
void set_onednn_override(int mode);
bool onednn_built();

// Whether oneDNN computes bf16 GEMMs and convolutions on this CPU: oneDNN 2.6 does from AVX-512
// (avx512_core) up, under any cap of MIXTRAIN_CPU_ISA or ONEDNN_MAX_CPU_ISA; below, its bf16 is the
// reference implementation, so the kernels here run bf16 calls on its fp32 primitives instead
// (operands widened exactly, the result rounded once: matmul.cpp, conv.cpp). From oneDNN's own
// ISA query; false without oneDNN.
bool onednn_runs_bf16();

// Calls oneDNN has run in this process (tests check which path a call took).
int64_t onednn_calls();

// Where oneDNN takes a call in Sized mode; other calls stay on the own kernels, whose per-call
// cost is lower (a oneDNN call costs about 2.5 us of CPU time more: memory objects, argument maps,
// the primitive's bookkeeping). From bench_cpu_onednn on a quiet 2-core Zen 4 without AMX
// (2026-11-28, bench/onednn_check.sh, docs/BENCHMARKS.md): square bf16 GEMMs on oneDNN overtook
// the vdpbf16ps kernel between 64^3 (0.94x) and 96^3 (1.05x) multiply-adds, fp32 ones Eigen
// between 96^3 (0.87x) and 128^3 (1.21x); convolutions of 16 channels and more were 1.1-3.5x
// faster from the tiny UNet's sizes up, but with 8 channels (padded to oneDNN's blocks of 16) up
// to 1.8x slower. Re-measure on a machine with AMX, whose bf16 products pay sooner. Both GEMM
// thresholds sit above the square sweep's: products with a side of 64 (the tiny MLP's, 2^21 to
// 2^21.7 multiply-adds) ran 1.2-1.6x slower per call on oneDNN in bf16 than on vdpbf16ps and no
// faster in fp32, and the tiny MLP's step was 1.15-1.45x slower with oneDNN (5 alternated rounds,
// 2026-11-28); the tiny transformer's products (2^21.6 to 2^22) were level either way.
constexpr int64_t kOneDnnGemmMinMacsBf16 = int64_t{1} << 22;
constexpr int64_t kOneDnnGemmMinMacsFp32 = int64_t{1} << 22;
constexpr int64_t kOneDnnConvMinMacs = int64_t{1} << 20;
constexpr int64_t kOneDnnConvMinChannels = 16;  // per group, input and output (depthwise: any)

// The kernels: each returns true when oneDNN ran the call, writing `impl` (oneDNN's
// implementation name, for the verbose trace), false when the caller must run its own kernel.
// Arguments as the kernels of backends/matmul.h and backends/conv.h take them.
bool onednn_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& out, const Tensor& bias,
                 GemmEpilogue epilogue, std::string& impl);
bool onednn_conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p, const Tensor& out,
                   std::string& impl);
bool onednn_conv2d_backward_input(const Tensor& grad_out, const Tensor& w, const Conv2dParams& p,
                                  const Tensor& grad_x, std::string& impl);
bool onednn_conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Conv2dParams& p,
                                   const Tensor& grad_w, std::string& impl);

// Whether onednn_gemm would take this call, from shapes, strides and dtypes alone (meta tensors
// will do): the meta backend models the CPU's scratch with it (oneDNN's path takes none).
bool onednn_takes_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& out,
                       const Tensor& bias, GemmEpilogue epilogue);

}  // namespace mixtrain::backends::cpu
