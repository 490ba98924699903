#pragma once
// What the fused-attention op tests share (test_attention_fused.cpp, test_attention_dropout.cpp):
// a call's sizes, its random inputs and output gradient, and a scope that runs the op's composite.
#include <string>

#include "ops/attention_fused.h"
#include "support/testing.h"

namespace mixtrain::testing {

// q [batch, l, e], k [batch, s, e], v [batch, s, ev].
struct AttentionSizes {
  int64_t batch, l, s, e, ev;
  bool causal;
};

inline std::string name_of(const AttentionSizes& z, DType dt) {
  return std::string(dtype_name(dt)) + " B" + std::to_string(z.batch) + " L" + std::to_string(z.l) + " S" +
         std::to_string(z.s) + (z.causal ? " causal" : "");
}

struct AttentionInputs {
  Tensor q, k, v, go;  // go: a gradient for the output
};

// q and k uniform in [-1.5, 1.5], v and go in [-1, 1].
inline AttentionInputs attention_inputs(const AttentionSizes& z, DType dt, uint64_t seed) {
  return {random_tensor({z.batch, z.l, z.e}, dt, seed, -1.5, 1.5),
          random_tensor({z.batch, z.s, z.e}, dt, seed + 1, -1.5, 1.5),
          random_tensor({z.batch, z.s, z.ev}, dt, seed + 2), random_tensor({z.batch, z.l, z.ev}, dt, seed + 3)};
}

// Runs the op's composite path (fused off) while alive.
struct CompositeOnly {
  CompositeOnly() { ops::set_attention_path(ops::AttentionPath::Composite); }
  ~CompositeOnly() { ops::set_attention_path(ops::AttentionPath::Measured); }
};

// Runs the fused kernels wherever they exist while alive, whatever the measured table says.
struct FusedOnly {
  FusedOnly() { ops::set_attention_path(ops::AttentionPath::Fused); }
  ~FusedOnly() { ops::set_attention_path(ops::AttentionPath::Measured); }
};

}  // namespace mixtrain::testing
