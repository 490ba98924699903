// The CPU backend's registration: each op family's file (backends/cpu/<family>.cpp) registers its
// kernels in register_<family>(); a new family adds one line to each list here.
#include "backends/cpu/cpu_backend.h"

namespace mixtrain::backends::cpu {

void register_copy();
void register_random();
void register_elementwise();
void register_reduce();
void register_softmax();
void register_loss();
void register_matmul();
void register_conv();
void register_pool_upsample();
void register_norm();
void register_embedding();
void register_amp();
void register_optim();

void register_kernels() {
  register_copy();
  register_random();
  register_elementwise();
  register_reduce();
  register_softmax();
  register_loss();
  register_matmul();
  register_conv();
  register_pool_upsample();
  register_norm();
  register_embedding();
  register_amp();
  register_optim();
}

}  // namespace mixtrain::backends::cpu
