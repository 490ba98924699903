#pragma once
// Device-side building blocks shared by the kernels: storage/compute types, conversions that
// round exactly as the CPU backend does, dtype dispatch, launch sizing and block reductions.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/cuda/launch_args.h"
#include "backends/dtype_dispatch.h"
#include "backends/elementwise_math.h"
#include "mixtrain/base/error.h"
#include "mixtrain/base/float8.h"

namespace mixtrain::kernels {

// ---- Types: the storage type of each DType and the type arithmetic runs in.
using backends::Tag;

template <class T> struct Acc { using type = T; };
template <> struct Acc<__half> { using type = float; };
template <> struct Acc<__nv_bfloat16> { using type = float; };
template <> struct Acc<Float8E4M3FN> { using type = float; };
template <> struct Acc<Float8E5M2> { using type = float; };
template <class T> using acc_t = typename Acc<T>::type;

template <class T> constexpr bool is_half_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
template <class T> constexpr bool is_float8_v = std::is_same_v<T, Float8E4M3FN> || std::is_same_v<T, Float8E5M2>;

// fp16 -> fp32 as the CPU converts it (F16C): a NaN keeps its sign and payload, made quiet. The
// hardware's cvt.f32.f16 gives the canonical NaN instead, whose lost sign the fp8 encoders would
// write (0x7f where the CPU and PyTorch write 0xff for a negative NaN).
__device__ __forceinline__ float half_to_float(__half h) {
  const unsigned b = __half_as_ushort(h);
  if ((b & 0x7C00u) == 0x7C00u && (b & 0x03FFu) != 0u)
    return __uint_as_float(((b & 0x8000u) << 16) | 0x7FC00000u | ((b & 0x03FFu) << 13));
  return __half2float(h);
}

// Converts like the CPU backend's copy(): half and fp8 types go through fp32 (so fp64 -> half
// rounds twice, as PyTorch and the CPU backend do), bool is "nonzero". The fp8 encoders are
// base/float8.h's, the CPU's own: the same bytes on both backends.
template <class To, class From>
__device__ __forceinline__ To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<float>(v) != 0.0f;  // as the CPU backend: a double below fp32's range is false
  } else if constexpr (std::is_same_v<From, __half>) {
    return convert<To>(half_to_float(v));
  } else if constexpr (is_half_v<From> || is_float8_v<From>) {
    return convert<To>(static_cast<float>(v));
  } else if constexpr (is_float8_v<To>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

template <class T>
__device__ __forceinline__ acc_t<T> load_acc(const T* p) {
  return convert<acc_t<T>>(*p);
}

// The fp32/fp64 math wrappers are the shared ones (backends/elementwise_math.h), so every kernel
// calls the same functions as the CPU backend's formulas.
using backends::math::m_abs;
using backends::math::m_erf;
using backends::math::m_exp;
using backends::math::m_log;
using backends::math::m_pow;
using backends::math::m_sqrt;
using backends::math::m_tanh;

// ---- Host-side dispatch over DType: the shared one (backends/dtype_dispatch.h) with CUDA's half types.
template <class F>
void dispatch_floating(DType dtype, const char* op, F&& f) {
  backends::dispatch_floating_types<__half, __nv_bfloat16>(dtype, op, "CUDA", std::forward<F>(f));
}

template <class F>
void dispatch_all(DType dtype, const char* op, F&& f) {
  backends::dispatch_all_types<__half, __nv_bfloat16>(dtype, op, "CUDA", std::forward<F>(f));
}

// Every dtype, fp8 included (copy, fill).
template <class F>
void dispatch_all_and_float8(DType dtype, const char* op, F&& f) {
  backends::dispatch_all_and_float8_types<__half, __nv_bfloat16>(dtype, op, "CUDA", std::forward<F>(f));
}

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ __forceinline__ int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

// n / d for 0 <= n < 2^31 by a multiply-high and a shift instead of a division (Granlund and
// Montgomery's method, as PyTorch's IntDivider): integer division is a long instruction sequence
// on the GPU, and 64-bit division far longer, so index arithmetic of strided kernels uses this.
struct FastDiv {
  uint32_t divisor = 1, magic = 1, shift = 0;
  FastDiv() = default;
  explicit FastDiv(uint32_t d) : divisor(d) {
    while (shift < 32 && (uint64_t{1} << shift) < d) ++shift;
    magic = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const { return (__umulhi(n, magic) + n) >> shift; }
};
constexpr int64_t kFastDivLimit = int64_t{1} << 31;

// Index dividers for kernels templated on their index range: Div32 when every index is below
// kFastDivLimit, Div64 (plain 64-bit division) beyond.
struct Div32 {
  FastDiv f;
  explicit Div32(int64_t d) : f(static_cast<uint32_t>(d)) {}
  __device__ __forceinline__ int64_t operator()(int64_t n) const { return f.div(static_cast<uint32_t>(n)); }
};
struct Div64 {
  int64_t d;
  explicit Div64(int64_t v) : d(v) {}
  __device__ __forceinline__ int64_t operator()(int64_t n) const { return n / d; }
};

// Calls f(Div32 or Div64 type tag) by the largest index the kernel will see.
template <class F>
void with_divider(int64_t max_index, F&& f) {
  if (max_index < kFastDivLimit) f(Tag<Div32>{});
  else f(Tag<Div64>{});
}

// ---- Launching.
constexpr int kThreads = 256;

// Blocks for `work` items at `per_block` items each, capped so grid-stride loops take the rest.
int64_t blocks_for(int64_t work, int64_t per_block);
// Throws mixtrain::Error naming the kernel when the launch failed.
void check_launch(const char* kernel);
int sm_count();

// ---- Reductions within a block (blockDim.x a multiple of 32, at most 1024).
template <class T, class Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Every thread gets the result. `shared` holds at least 32 T.
template <class T, class Op>
__device__ __forceinline__ T block_reduce(T v, Op op, T* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_reduce(v, op);
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = shared[0];
  for (int i = 1; i < warps; ++i) v = op(v, shared[i]);
  return v;
}

// Reduction across the `Group` threads that share a row (32: a warp; 0: the whole block).
template <int Group, class A, class Op>
__device__ __forceinline__ A group_reduce(A v, Op op, A* shared) {
  if constexpr (Group == 32) return warp_reduce(v, op);
  else return block_reduce(v, op, shared);
}

// The rows handled by this block and the thread's place in its row.
template <int Group>
struct RowSlot {
  int64_t row;
  int lane, width;
  __device__ RowSlot() {
    if constexpr (Group == 32) {
      row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
      lane = threadIdx.x % 32;
      width = 32;
    } else {
      row = blockIdx.x;
      lane = threadIdx.x;
      width = blockDim.x;
    }
  }
};

// out[k] = accum[k] rounded to T: the last step of a scatter-add done in a wider buffer.
template <class T, class B>
__global__ void round_accum(const B* accum, int64_t n, T* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += stride)
    out[k] = convert<T>(accum[k]);
}

// A scatter-add into a gradient of `in_total` elements: zeroes the accumulation buffer (grad
// itself for fp32/fp64, `accum` (fp32) for half types), runs launch(tag, buffer) when there is
// anything to scatter, and rounds the buffer into grad for half types.
template <class Launch>
void scatter_add(DType dtype, const char* name, int64_t in_total, bool any, void* grad, void* accum,
                 cudaStream_t stream, Launch&& launch) {
  if (in_total == 0) return;
  dispatch_floating(dtype, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using B = std::conditional_t<std::is_same_v<T, double>, double, float>;
    B* buf = std::is_same_v<T, B> ? static_cast<B*>(grad) : static_cast<B*>(accum);
    MT_CHECK(buf, name, ": a half gradient needs an fp32 accumulation buffer");
    MT_CHECK(cudaMemsetAsync(buf, 0, sizeof(B) * static_cast<size_t>(in_total), stream) == cudaSuccess, name,
             ": cudaMemsetAsync failed");
    if (any) launch(tag, buf);
    check_launch(name);
    if constexpr (!std::is_same_v<T, B>)
      round_accum<T, B><<<blocks_for(in_total, kThreads), kThreads, 0, stream>>>(buf, in_total, static_cast<T*>(grad));
  });
  check_launch(name);
}

struct SumOp {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a > b ? a : b; }
};

// A host double as the CPU backend stores it in T (its convert<T>(double)): fills and dropout's scale.
template <class T>
inline T host_value(double v) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, bool>) return static_cast<float>(v) != 0.0f;
  else return static_cast<T>(v);
}

}  // namespace mixtrain::kernels
