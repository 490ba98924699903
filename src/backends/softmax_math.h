#pragma once
// The arithmetic of softmax and log_softmax, written once for both backends as elementwise_math.h
// is for the elementwise ops: the CPU loops (backends/cpu/softmax.cpp) and the CUDA kernels
// (kernels/cuda/softmax.cu) call the same functions, so the two agree by construction. Each
// backend keeps how it walks a row (the CPU in order; CUDA by warps, blocks or a thread per
// column) and how it sums. A is the compute type: fp32 for half data, fp64 for fp64.
#include <cmath>

#include "backends/elementwise_math.h"

namespace mixtrain::backends::math {

// The shift subtracted before exp: the row's max, but 0 for a row of -inf only, so exp stays
// finite and the row becomes NaN (softmax) as in PyTorch.
template <class A>
MT_HOST_DEVICE inline A softmax_shift(A row_max) {
  return row_max == A(-INFINITY) ? A(0) : row_max;
}

// One element of the output from x, the shift and the row's sum of exp(x - shift).
template <class A>
MT_HOST_DEVICE inline A softmax_value(A x, A shift, A inv_total) {
  return m_exp(x - shift) * inv_total;
}
template <class A>
MT_HOST_DEVICE inline A log_softmax_lse(A shift, A total) {
  return shift + m_log(total);
}

// Backward from the forward's output y and the incoming gradient g: the row's sum of these terms
// (g for log_softmax, g y for softmax), then each gradient from it.
template <class A>
MT_HOST_DEVICE inline A softmax_backward_term(bool log, A y, A g) {
  return log ? g : g * y;
}
template <class A>
MT_HOST_DEVICE inline A softmax_backward_value(bool log, A y, A g, A sum) {
  return log ? g - m_exp(y) * sum : y * (g - sum);
}

}  // namespace mixtrain::backends::math
