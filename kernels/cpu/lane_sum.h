#pragma once
// The CPU kernels' reproducible sum, in a header of plain types so that the copies compiled per
// instruction set (norm_vector.cpp) sum in the same order as the portable loops (loops.h).
#include <cstdint>

namespace mixtrain::backends::cpu {

// The sum of f(k) over [0, n) in independent lanes, so the adds pipeline (and vectorize) instead
// of waiting on one accumulator. The grouping depends only on n: results are reproducible.
template <class S = double, class F>
S lane_sum(int64_t n, F&& f) {
  constexpr int kLanes = 8;
  S lane[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] += f(k + l);
  S total = 0;
  for (; k < n; ++k) total += f(k);
  for (int l = 0; l < kLanes; ++l) total += lane[l];
  return total;
}

}  // namespace mixtrain::backends::cpu
