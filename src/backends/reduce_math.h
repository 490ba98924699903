#pragma once
// The rules of the reduce family's kernels, written once for both backends as elementwise_math.h
// is for the elementwise ops: the CPU loops (backends/cpu/reduce.cpp) and the CUDA kernels
// (kernels/cuda/reduce.cu, topk.cu) call the same functions, so which element max/min
// and their arg pick, and topk's order, agree by construction. Each backend keeps how it walks
// the data: the CPU scans an axis in order (takes_over), CUDA combines partial results in any
// order (combine, from reduce_identity()). The sums' accumulators stay the backends' own (the CPU
// adds in fp64, CUDA in fp32, fp64 for fp64 data); mean, var and std are composed of sums in
// the ops layer, so they need no rule here.
#include <cstdint>
#include <limits>
#include <type_traits>

#include "backends/kernel_types.h"
#include "mixtrain/base/host_device.h"

namespace mixtrain::backends::math {

// v != v for floating types, false for integers (where the self-comparison only draws a warning).
template <class A>
MT_HOST_DEVICE inline bool is_nan(A v) {
  if constexpr (std::is_floating_point_v<A>) return v != v;
  else return false;
}

// A value and its index along the reduced axis (the arg of max/min; 0 in a sum).
template <class A>
struct ValueIndex {
  A value;
  int64_t index;
};

// Max/min in a scan of the axis in index order: whether `next` takes the place of `best`, the
// pick among the elements before it (a number, not NaN; the scan stops at a NaN). A NaN takes
// over and stays, as torch.max propagates it; otherwise only a strictly larger (smaller) value,
// so of equal extremes the first keeps the index.
template <ReduceOp Op, class A>
MT_HOST_DEVICE inline bool takes_over(A best, A next) {
  static_assert(Op != ReduceOp::Sum, "a sum has no pick");
  if constexpr (Op == ReduceOp::Max) return is_nan(next) || next > best;
  else return is_nan(next) || next < best;
}

// The result over no elements, which combine leaves every element's own: 0 for a sum; for
// max/min the infinity on the losing side (the type's end for integers) at an index after every
// element, so an element equal to it still wins the tie.
template <ReduceOp Op, class A>
MT_HOST_DEVICE inline ValueIndex<A> reduce_identity() {
  using Limits = std::numeric_limits<A>;
  constexpr int64_t kAfterAll = std::numeric_limits<int64_t>::max();
  if constexpr (Op == ReduceOp::Sum) {
    return {A(0), 0};
  } else if constexpr (Limits::has_infinity) {
    return {Op == ReduceOp::Max ? -Limits::infinity() : Limits::infinity(), kAfterAll};
  } else {
    return {Op == ReduceOp::Max ? Limits::lowest() : Limits::max(), kAfterAll};
  }
}

// Two partial results of disjoint parts of the axis, in either order: the pick of their union
// under the scan's rule (the lower index scanned first). Associative and commutative, so a tree
// of partials gives what the scan gives: the first NaN, else the first extreme value.
template <ReduceOp Op, class A>
MT_HOST_DEVICE inline ValueIndex<A> combine(const ValueIndex<A>& a, const ValueIndex<A>& b) {
  if constexpr (Op == ReduceOp::Sum) {
    return {a.value + b.value, 0};
  } else {
    const bool a_first = a.index <= b.index;
    const ValueIndex<A>& first = a_first ? a : b;
    const ValueIndex<A>& second = a_first ? b : a;
    if (is_nan(first.value)) return first;
    return takes_over<Op>(first.value, second.value) ? second : first;
  }
}

// topk's output order, a strict total order on a row's elements (value a at index ia before
// value b at index ib): largest puts NaN first, then descending values; smallest ascending
// values, then NaN; equal values by index.
template <class A>
MT_HOST_DEVICE inline bool topk_before(A a, int64_t ia, A b, int64_t ib, bool largest) {
  const bool na = is_nan(a), nb = is_nan(b);
  if (na != nb) return largest ? na : nb;
  if (!na && a != b) return largest ? a > b : a < b;
  return ia < ib;
}

}  // namespace mixtrain::backends::math
