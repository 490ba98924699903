// The GradScaler's kernels. non_finite_check_and_unscale: one launch over all gradients of an
// optimizer (each block takes one chunk of one tensor, as PyTorch's multi_tensor_apply), reading
// the scale from device memory and raising a device flag, so unscaling needs no host round trip.
// update_scale: the scale/tracker rule of backends::ScaleUpdateArgs in one device thread.
#include <algorithm>
#include <cfloat>
#include <cstring>
#include <vector>

#include "kernels/cuda/amp.h"
#include "common.cuh"

namespace mixtrain::kernels {

namespace {

struct ChunkRef {
  int64_t tensor;
  int64_t start;
};

constexpr float kFp16MinNormal = 6.103515625e-05f;  // 2^-14

template <class C>
struct ScanState {
  int bad = 0;
  float max_abs = 0;
  unsigned long long zeros = 0, subnormal = 0;
};

template <class C, bool Stats>
__device__ __forceinline__ void scan_one(C v, ScanState<C>& s) {
  const C a = v < C(0) ? -v : v;
  const bool finite = a <= (std::is_same_v<C, double> ? DBL_MAX : FLT_MAX);
  s.bad |= !finite;
  if constexpr (Stats) {
    const float fa = finite ? static_cast<float>(a < C(FLT_MAX) ? a : C(FLT_MAX)) : 0.0f;
    s.max_abs = fa > s.max_abs ? fa : s.max_abs;
    s.zeros += v == C(0);
    s.subnormal += (a > C(0)) & (a < C(kFp16MinNormal));
  }
}

// The unscaled value must be finite too: a finite gradient times a huge inverse scale can
// overflow (as src/backends/cpu/amp.cpp checks).
template <class C>
__device__ __forceinline__ void check_unscaled(C u, ScanState<C>& s) {
  const C a = u < C(0) ? -u : u;
  s.bad |= !(a <= (std::is_same_v<C, double> ? DBL_MAX : FLT_MAX));
}

template <class G, class O, bool Stats, int V>
__global__ void check_unscale_kernel(const TensorSpan* spans, const ChunkRef* chunks, const float* inv_scale,
                                     float* found_inf, double* stats) {
  using C = std::conditional_t<std::is_same_v<G, double>, double, float>;
  const ChunkRef ref = chunks[blockIdx.x];
  const TensorSpan span = spans[ref.tensor];
  const int64_t end = min64(span.n, ref.start + kAmpChunk);
  const C inv = static_cast<C>(*inv_scale);
  const bool write = !(span.in == span.out && inv == C(1));  // in place by 1: only check
  const G* in = static_cast<const G*>(span.in);
  O* out = static_cast<O*>(span.out);
  ScanState<C> st;
  for (int64_t i = ref.start + static_cast<int64_t>(threadIdx.x) * V; i < end; i += static_cast<int64_t>(blockDim.x) * V) {
    if (V > 1 && i + V <= end) {
      struct alignas(sizeof(G) * V) InPack { G v[V]; };
      struct alignas(sizeof(O) * V) OutPack { O v[V]; };
      const InPack p = *reinterpret_cast<const InPack*>(in + i);
      OutPack q;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const C v = convert<C>(p.v[k]);
        scan_one<C, Stats>(v, st);
        const C u = v * inv;
        check_unscaled(u, st);
        q.v[k] = convert<O>(u);
      }
      if (write) *reinterpret_cast<OutPack*>(out + i) = q;
    } else {
      for (int64_t k = i; k < end && k < i + V; ++k) {
        const C v = convert<C>(in[k]);
        scan_one<C, Stats>(v, st);
        const C u = v * inv;
        check_unscaled(u, st);
        if (write) out[k] = convert<O>(u);
      }
    }
  }
  if (__syncthreads_or(st.bad) && threadIdx.x == 0) *found_inf = 1.0f;
  if constexpr (Stats) {
    __shared__ float smax[32];
    __shared__ unsigned long long scount[32];
    const float mx = block_reduce(st.max_abs, MaxOp{}, smax);
    const unsigned long long zeros = block_reduce(st.zeros, SumOp{}, scount);
    const unsigned long long sub = block_reduce(st.subnormal, SumOp{}, scount);
    if (threadIdx.x == 0) {
      // Non-negative doubles order as their bit patterns do.
      atomicMax(reinterpret_cast<unsigned long long*>(stats + backends::kAmpStatMaxAbs),
                static_cast<unsigned long long>(__double_as_longlong(static_cast<double>(mx))));
      atomicAdd(stats + backends::kAmpStatZeros, static_cast<double>(zeros));
      atomicAdd(stats + backends::kAmpStatFp16Subnormal, static_cast<double>(sub));
      atomicAdd(stats + backends::kAmpStatElements, static_cast<double>(end - ref.start));
    }
  }
}

__global__ void update_scale_kernel(float* scale, int32_t* growth, int32_t* hyst, const float* found_inf,
                                    backends::ScaleUpdateArgs a, float* at_min) {
  float s = *scale;
  *at_min = 0.0f;
  if (*found_inf != 0.0f) {
    *growth = 0;
    const int32_t h = *hyst > 1 ? *hyst - 1 : 0;
    *hyst = h;
    if (h == 0) {
      float next = static_cast<float>(static_cast<double>(s) * a.backoff_factor);
      if (a.min_scale > 0.0) {
        if (static_cast<double>(s) <= a.min_scale) *at_min = 1.0f;
        next = fmaxf(next, static_cast<float>(a.min_scale));
      }
      *scale = next;
    }
  } else {
    *hyst = static_cast<int32_t>(a.hysteresis);
    const int64_t successful = static_cast<int64_t>(*growth) + 1;
    if (successful >= a.growth_interval) {
      float next = static_cast<float>(static_cast<double>(s) * a.growth_factor);
      if (isfinite(next)) {
        if (a.max_scale > 0.0) next = fminf(next, static_cast<float>(a.max_scale));
        *scale = next;
      }
      *growth = 0;
    } else {
      *growth = static_cast<int32_t>(successful);
    }
  }
}

}  // namespace

int64_t multi_tensor_chunks(const TensorSpan* spans, int count) {
  int64_t chunks = 0;
  for (int t = 0; t < count; ++t) chunks += (spans[t].n + kAmpChunk - 1) / kAmpChunk;
  return chunks;
}

size_t multi_tensor_meta_bytes(int count, int64_t chunks) {
  return sizeof(TensorSpan) * static_cast<size_t>(count) + sizeof(ChunkRef) * static_cast<size_t>(chunks);
}

void pack_multi_tensor_meta(const TensorSpan* spans, int count, void* host_buffer) {
  char* p = static_cast<char*>(host_buffer);
  std::memcpy(p, spans, sizeof(TensorSpan) * static_cast<size_t>(count));
  ChunkRef* refs = reinterpret_cast<ChunkRef*>(p + sizeof(TensorSpan) * static_cast<size_t>(count));
  for (int t = 0; t < count; ++t)
    for (int64_t s = 0; s < spans[t].n; s += kAmpChunk) *refs++ = ChunkRef{t, s};
}

bool multi_tensor_vectorizable(const TensorSpan* spans, int count, DType grad, DType out) {
  // Packs of 16 bytes of gradient (at most 8 elements) and as many output elements.
  const size_t g = element_size(grad), v = std::min<size_t>(16 / g, 8), o = element_size(out) * v;
  for (int t = 0; t < count; ++t)
    if (reinterpret_cast<uintptr_t>(spans[t].in) % (g * v) != 0 || reinterpret_cast<uintptr_t>(spans[t].out) % o != 0)
      return false;
  return true;
}

void non_finite_check_and_unscale(DType grad, DType out, const void* meta, int count, int64_t chunks, bool vectorize,
                                  const float* inv_scale, float* found_inf, double* stats, cudaStream_t stream) {
  if (chunks == 0) return;
  const TensorSpan* spans = static_cast<const TensorSpan*>(meta);
  const ChunkRef* refs = reinterpret_cast<const ChunkRef*>(static_cast<const char*>(meta) +
                                                           sizeof(TensorSpan) * static_cast<size_t>(count));
  const unsigned blocks = static_cast<unsigned>(chunks);
  dispatch_floating(grad, "non_finite_check_and_unscale", [&](auto tag) {
    using G = typename decltype(tag)::type;
    auto run = [&](auto out_tag) {
      using O = typename decltype(out_tag)::type;
      constexpr int V = 16 / sizeof(G) < 8 ? 16 / sizeof(G) : 8;
      auto launch = [&](auto width) {
        constexpr int W = decltype(width)::value;
        if (stats) check_unscale_kernel<G, O, true, W><<<blocks, 512, 0, stream>>>(spans, refs, inv_scale, found_inf, stats);
        else check_unscale_kernel<G, O, false, W><<<blocks, 512, 0, stream>>>(spans, refs, inv_scale, found_inf, stats);
      };
      if (vectorize) launch(std::integral_constant<int, V>{});
      else launch(std::integral_constant<int, 1>{});
    };
    if (out == grad) run(Tag<G>{});
    else if (out == DType::Float32) run(Tag<float>{});
    else MT_ERROR("non_finite_check_and_unscale: ", grad, " gradients with ", out, " outputs are not supported");
  });
  check_launch("non_finite_check_and_unscale");
}

void update_scale(float* scale, int32_t* growth_tracker, int32_t* hysteresis_tracker, const float* found_inf,
                  const backends::ScaleUpdateArgs& args, float* at_min_scale, cudaStream_t stream) {
  update_scale_kernel<<<1, 1, 0, stream>>>(scale, growth_tracker, hysteresis_tracker, found_inf, args, at_min_scale);
  check_launch("update_scale");
}

}  // namespace mixtrain::kernels
