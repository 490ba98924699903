#pragma once
// CPU autocast presets. mixtrain's default ("cuda") runs the CPU under the CUDA op lists and
// fp16, so the CPU backend reproduces a GPU run's numerics; "pytorch" is PyTorch's own CPU
// autocast: its CPU op lists (torch.autocast("cpu"): matrix products and convolutions in bf16, the
// losses in fp32, cat/stack promoted, every other op as its inputs come) and bf16 by default.
#include <string>
#include <vector>

#include "common/train_loop.h"

namespace mixtrain::cli {

const std::vector<std::string>& cpu_autocast_presets();  // {"cuda", "pytorch"}

// Sets every op's cast policy to the preset's ("cuda": the default table). The table is
// process-wide: it applies to CUDA autocast as well.
void apply_cpu_autocast_preset(const std::string& name);

// The precision a preset trains with when --precision is not given.
examples::Precision cpu_autocast_precision(const std::string& name);

}  // namespace mixtrain::cli
