#pragma once
// The --cpu-autocast flag: "cuda" (mixtrain's default: the CUDA op lists and fp16 on the CPU too,
// so the CPU backend reproduces a GPU run's numerics) or "pytorch" (PyTorch's own CPU autocast:
// amp::PolicyPreset::TorchCpu and bf16 by default).
#include <string>
#include <vector>

#include <mixtrain/train/train_loop.h>

namespace mixtrain::cli {

const std::vector<std::string>& cpu_autocast_presets();  // {"cuda", "pytorch"}

// amp::apply_policy_preset for the flag's name. The table is process-wide: it applies to CUDA
// autocast as well.
void apply_cpu_autocast_preset(const std::string& name);

// The precision a preset trains with when --precision is not given.
train::Precision cpu_autocast_precision(const std::string& name);

}  // namespace mixtrain::cli
