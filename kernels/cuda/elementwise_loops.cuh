#pragma once
// The generic elementwise map: out = f(in...) over an ElemIter, each input read in its compute
// type and the result converted once to the output type. Contiguous operands take a vectorized
// grid-stride loop (four elements per access when every pointer is aligned for it); anything
// else (broadcasts, transposes, slices) computes byte offsets per element.
#include <cstddef>
#include <utility>

#include "common.cuh"

namespace mixtrain::kernels {

template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  using value_type = T;
  T v[V];
};

template <int N>
__device__ __forceinline__ void offsets_of(const ElemIter<N>& it, int64_t linear, int64_t (&off)[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = it.ndim - 1; d >= 0; --d) {
    const int64_t size = it.sizes[d];
    const int64_t idx = linear % size;
    linear /= size;
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] += idx * it.strides[k][d];
  }
}

// The same iteration with 32-bit index arithmetic (FastDiv per dimension), for fewer than 2^31
// elements: most strided work (copies of transposed views, broadcasts), several times faster.
template <int N>
struct ElemIter32 {
  int ndim = 0;
  uint32_t numel = 0;
  FastDiv sizes[kMaxDims];
  int64_t strides[N][kMaxDims] = {};
  char* data[N] = {};
  explicit ElemIter32(const ElemIter<N>& it) : ndim(it.ndim), numel(static_cast<uint32_t>(it.numel)) {
    for (int d = 0; d < it.ndim; ++d) {
      sizes[d] = FastDiv(static_cast<uint32_t>(it.sizes[d]));
      for (int k = 0; k < N; ++k) strides[k][d] = it.strides[k][d];
    }
    for (int k = 0; k < N; ++k) data[k] = it.data[k];
  }
};

template <int N>
__device__ __forceinline__ void offsets_of(const ElemIter32<N>& it, uint32_t linear, int64_t (&off)[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = it.ndim - 1; d >= 0; --d) {
    const uint32_t q = it.sizes[d].div(linear);
    const int64_t idx = linear - q * it.sizes[d].divisor;
    linear = q;
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] += idx * it.strides[k][d];
  }
}

template <int V, class F, class Out, class... P>
__device__ __forceinline__ void apply_packs(const F& f, Pack<Out, V>* out, const P&... packs) {
  Pack<Out, V> o;
#pragma unroll
  for (int k = 0; k < V; ++k) o.v[k] = convert<Out>(f(convert<acc_t<typename P::value_type>>(packs.v[k])...));
  *out = o;
}

template <int V, class F, class Out, class... In>
__global__ void map_contiguous(int64_t n, F f, Out* __restrict__ out, const In* __restrict__... in) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nvec = n / V;
  for (int64_t v = first; v < nvec; v += stride)
    apply_packs<V>(f, reinterpret_cast<Pack<Out, V>*>(out) + v, reinterpret_cast<const Pack<In, V>*>(in)[v]...);
  for (int64_t i = nvec * V + first; i < n; i += stride) out[i] = convert<Out>(f(load_acc(in + i)...));
}

template <class F, class Out, class... In, size_t... I>
__device__ __forceinline__ void apply_at(const F& f, char* const* data, const int64_t* off, std::index_sequence<I...>) {
  *reinterpret_cast<Out*>(data[0] + off[0]) =
      convert<Out>(f(load_acc(reinterpret_cast<const In*>(data[I + 1] + off[I + 1]))...));
}

template <class F, class Out, class... In>
__global__ void map_strided(ElemIter<1 + sizeof...(In)> it, F f) {
  constexpr int N = 1 + sizeof...(In);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < it.numel; i += stride) {
    int64_t off[N];
    offsets_of(it, i, off);
    apply_at<F, Out, In...>(f, it.data, off, std::index_sequence_for<In...>{});
  }
}

template <class F, class Out, class... In>
__global__ void map_strided32(ElemIter32<1 + sizeof...(In)> it, F f) {
  constexpr int N = 1 + sizeof...(In);
  const uint32_t stride = gridDim.x * blockDim.x;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < it.numel; i += stride) {
    int64_t off[N];
    offsets_of(it, i, off);
    apply_at<F, Out, In...>(f, it.data, off, std::index_sequence_for<In...>{});
  }
}

template <class T>
bool aligned_for(const void* p, int v) {
  return reinterpret_cast<uintptr_t>(p) % (sizeof(T) * static_cast<size_t>(v)) == 0;
}

template <class Out, class... In, class F, size_t... I>
void launch_contiguous(const ElemIter<1 + sizeof...(In)>& it, const F& f, cudaStream_t stream,
                       std::index_sequence<I...>) {
  constexpr int V = 4;
  Out* out = reinterpret_cast<Out*>(it.data[0]);
  const bool vec = aligned_for<Out>(out, V) && (aligned_for<In>(it.data[I + 1], V) && ...);
  if (vec) {
    map_contiguous<V><<<blocks_for(it.numel / V + 1, kThreads), kThreads, 0, stream>>>(
        it.numel, f, out, reinterpret_cast<const In*>(it.data[I + 1])...);
  } else {
    map_contiguous<1><<<blocks_for(it.numel, kThreads), kThreads, 0, stream>>>(
        it.numel, f, out, reinterpret_cast<const In*>(it.data[I + 1])...);
  }
}

// out = f(in...) over `it` (operand 0 is the output).
template <class Out, class... In, class F>
void launch_map(const ElemIter<1 + sizeof...(In)>& it, const F& f, cudaStream_t stream, const char* name) {
  if (it.numel == 0) return;
  if (it.contiguous) {
    launch_contiguous<Out, In...>(it, f, stream, std::index_sequence_for<In...>{});
  } else if (it.numel < kFastDivLimit) {
    map_strided32<F, Out, In...><<<blocks_for(it.numel, kThreads), kThreads, 0, stream>>>(ElemIter32<1 + sizeof...(In)>(it), f);
  } else {
    map_strided<F, Out, In...><<<blocks_for(it.numel, kThreads), kThreads, 0, stream>>>(it, f);
  }
  check_launch(name);
}

}  // namespace mixtrain::kernels
