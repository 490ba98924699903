// Sum / max / min (with arg) over the middle axis of a contiguous [outer, n, inner] view. Rows
// (inner == 1) reduce with one block per row; columns (inner > 1) with 32 columns per block so
// reads coalesce. When there are too few outputs to fill the GPU, the reduced axis is also split
// across blocks into partials that a second kernel combines in order.
#include <algorithm>

#include "kernels/cuda/reduce.h"
#include "backends/reduce_math.h"
#include "common.cuh"

namespace mixtrain::kernels {

using backends::ReduceOp;

namespace {

// A partial result: the value and, for max/min, its index (backends/reduce_math.h).
template <class A>
using Partial = backends::math::ValueIndex<A>;
static_assert(sizeof(Partial<double>) <= 16, "reduce_workspace_bytes assumes 16-byte partials");

// The accumulator: sums of floating types in fp32 (fp64 for fp64), of integers in int64;
// max/min in the compute type.
template <ReduceOp Op, class T>
using red_acc_t = std::conditional_t<Op == ReduceOp::Sum && !std::is_floating_point_v<acc_t<T>>, int64_t,
                                     std::conditional_t<std::is_same_v<T, bool>, int, acc_t<T>>>;

using backends::math::combine;
using backends::math::reduce_identity;

template <ReduceOp Op, class A>
__device__ __forceinline__ Partial<A> shfl_combine(Partial<A> p, int offset) {
  Partial<A> other{__shfl_xor_sync(0xffffffffu, p.value, offset), __shfl_xor_sync(0xffffffffu, p.index, offset)};
  return combine<Op>(p, other);
}

template <class A, class TO>
__device__ __forceinline__ void emit(const Partial<A>& p, TO* out, int64_t* indices, int64_t k) {
  out[k] = convert<TO>(p.value);
  if (indices) indices[k] = p.index;
}

// grid: (outer, splits); each block reduces x[o, chunk s] of one row.
template <ReduceOp Op, class T, class A, class TO>
__global__ void reduce_rows(const T* __restrict__ x, int64_t n, int64_t chunk, TO* out, int64_t* indices,
                            Partial<A>* partials) {
  __shared__ Partial<A> shared[32];
  const int64_t o = blockIdx.x, s = blockIdx.y, begin = s * chunk, end = min64(n, begin + chunk);
  const T* row = x + o * n;
  Partial<A> p = reduce_identity<Op, A>();
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) p = combine<Op>(p, Partial<A>{convert<A>(row[j]), j});
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) p = shfl_combine<Op>(p, offset);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = p;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) p = combine<Op>(p, shared[w]);
  if (partials) partials[o * gridDim.y + s] = p;
  else emit(p, out, indices, o);
}

constexpr int kColTile = 32, kColRows = 8;

// grid: (outer * column tiles, splits); block (32, 8): x over columns, y over the reduced axis.
template <ReduceOp Op, class T, class A, class TO>
__global__ void reduce_cols(const T* __restrict__ x, int64_t n, int64_t inner, int64_t chunk, TO* out,
                            int64_t* indices, Partial<A>* partials) {
  __shared__ Partial<A> shared[kColRows][kColTile + 1];
  const int64_t tiles = (inner + kColTile - 1) / kColTile;
  const int64_t o = blockIdx.x / tiles, i = (blockIdx.x % tiles) * kColTile + threadIdx.x;
  const int64_t s = blockIdx.y, begin = s * chunk, end = min64(n, begin + chunk);
  Partial<A> p = reduce_identity<Op, A>();
  if (i < inner)
    for (int64_t j = begin + threadIdx.y; j < end; j += kColRows)
      p = combine<Op>(p, Partial<A>{convert<A>(x[(o * n + j) * inner + i]), j});
  shared[threadIdx.y][threadIdx.x] = p;
  __syncthreads();
  if (threadIdx.y != 0 || i >= inner) return;
  for (int r = 1; r < kColRows; ++r) p = combine<Op>(p, shared[r][threadIdx.x]);
  if (partials) partials[(o * gridDim.y + s) * inner + i] = p;
  else emit(p, out, indices, o * inner + i);
}

// One warp per output combines its `splits` partials ([outer, splits, inner]): lanes stride over
// the splits, then a shuffle tree (the combine is associative and commutative, ties broken by
// index, so the order does not change the result).
template <ReduceOp Op, class A, class TO>
__global__ void reduce_finish(const Partial<A>* partials, int64_t outer, int64_t splits, int64_t inner, TO* out,
                              int64_t* indices) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; k < outer * inner;
       k += warps) {
    const int64_t o = k / inner, i = k % inner;
    Partial<A> p = reduce_identity<Op, A>();
    for (int64_t s = lane; s < splits; s += 32) p = combine<Op>(p, partials[(o * splits + s) * inner + i]);
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) p = shfl_combine<Op>(p, offset);
    if (lane == 0) emit(p, out, indices, k);
  }
}

struct Plan {
  int64_t blocks, splits, chunk;
};

Plan plan_for(int64_t outer, int64_t n, int64_t inner) {
  const int64_t blocks = inner == 1 ? outer : outer * ((inner + kColTile - 1) / kColTile);
  const int64_t target = 4 * static_cast<int64_t>(sm_count());
  int64_t splits = 1;
  if (blocks < target && n > 4096) splits = std::min<int64_t>({(target + blocks - 1) / blocks, n / 2048, 1024});
  splits = std::max<int64_t>(splits, 1);
  const int64_t chunk = (n + splits - 1) / splits;
  return {blocks, (n + chunk - 1) / std::max<int64_t>(chunk, 1), chunk};
}

template <ReduceOp Op, class T, class TO>
void launch(const void* xv, void* outv, int64_t* indices, int64_t outer, int64_t n, int64_t inner, void* workspace,
            cudaStream_t stream) {
  using A = red_acc_t<Op, T>;
  const T* x = static_cast<const T*>(xv);
  TO* out = static_cast<TO*>(outv);
  const Plan plan = plan_for(outer, n, inner);
  Partial<A>* partials = plan.splits > 1 ? static_cast<Partial<A>*>(workspace) : nullptr;
  MT_CHECK(plan.splits == 1 || partials, "reduce: missing workspace");
  const dim3 grid(static_cast<unsigned>(plan.blocks), static_cast<unsigned>(plan.splits));
  if (inner == 1) {
    int threads = 32;
    while (threads < 256 && threads < plan.chunk) threads *= 2;
    reduce_rows<Op, T, A, TO><<<grid, threads, 0, stream>>>(x, n, plan.chunk, out, indices, partials);
  } else {
    reduce_cols<Op, T, A, TO><<<grid, dim3(kColTile, kColRows), 0, stream>>>(x, n, inner, plan.chunk, out, indices,
                                                                            partials);
  }
  check_launch("reduce");
  if (partials) {
    reduce_finish<Op, A, TO><<<blocks_for(outer * inner, kThreads / 32), kThreads, 0, stream>>>(
        partials, outer, plan.splits, inner, out, indices);
    check_launch("reduce_finish");
  }
}

}  // namespace

size_t reduce_workspace_bytes(DType, int64_t outer, int64_t n, int64_t inner) {
  const Plan plan = plan_for(outer, n, inner);
  return plan.splits > 1 ? static_cast<size_t>(outer * plan.splits * inner) * 16 : 0;
}

void reduce(ReduceOp op, DType in, DType out_dtype, const void* x, void* out, int64_t* indices, int64_t outer,
            int64_t n, int64_t inner, void* workspace, cudaStream_t stream) {
  if (outer * inner == 0) return;
  MT_CHECK(n > 0 || op == ReduceOp::Sum, "reduce: max/min over an empty dimension");
  // The ops layer reduces floating tensors into their own dtype (it casts first for sum(dtype=)) or,
  // for partial sums of half inputs, into fp32; integers into theirs or into int64 (sums).
  dispatch_all(in, "reduce", [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto run = [&](auto out_tag) {
      using TO = typename decltype(out_tag)::type;
      switch (op) {
        case ReduceOp::Sum: launch<ReduceOp::Sum, T, TO>(x, out, indices, outer, n, inner, workspace, stream); break;
        case ReduceOp::Max: launch<ReduceOp::Max, T, TO>(x, out, indices, outer, n, inner, workspace, stream); break;
        case ReduceOp::Min: launch<ReduceOp::Min, T, TO>(x, out, indices, outer, n, inner, workspace, stream); break;
      }
    };
    constexpr bool half_in = std::is_same_v<acc_t<T>, float> && !std::is_same_v<T, float>;
    if (out_dtype == in) run(Tag<T>{});
    else if (!std::is_floating_point_v<acc_t<T>> && out_dtype == DType::Int64) run(Tag<int64_t>{});
    else if (half_in && out_dtype == DType::Float32) run(Tag<float>{});  // partial sums of half inputs
    else MT_ERROR("reduce: ", in, " input with a ", out_dtype, " output is not supported on CUDA");
  });
}

}  // namespace mixtrain::kernels
