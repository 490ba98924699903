// The CPU backend's registration: each op family's file (backends/cpu/<family>.cpp) registers its
// kernels in register_<family>(); backends/families.h lists the families.
#include "backends/cpu/cpu_backend.h"
#include "backends/families.h"

namespace mixtrain::backends::cpu {

#define MT_DECLARE_REGISTER(family) void register_##family();
MT_KERNEL_FAMILIES(MT_DECLARE_REGISTER)
#undef MT_DECLARE_REGISTER

void register_kernels() {
#define MT_CALL_REGISTER(family) register_##family();
  MT_KERNEL_FAMILIES(MT_CALL_REGISTER)
#undef MT_CALL_REGISTER
}

}  // namespace mixtrain::backends::cpu
