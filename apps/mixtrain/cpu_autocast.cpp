#include "cpu_autocast.h"

#include <algorithm>
#include <stdexcept>

#include <mixtrain/mixtrain.h>

namespace mixtrain::cli {

namespace {

void check_name(const std::string& name) {
  const auto& names = cpu_autocast_presets();
  if (std::find(names.begin(), names.end(), name) == names.end())
    throw std::runtime_error("--cpu-autocast expects cuda or pytorch, got '" + name + "'");
}

}  // namespace

const std::vector<std::string>& cpu_autocast_presets() {
  static const std::vector<std::string> names = {"cuda", "pytorch"};
  return names;
}

void apply_cpu_autocast_preset(const std::string& name) {
  check_name(name);
  amp::apply_policy_preset(name == "pytorch" ? amp::PolicyPreset::TorchCpu : amp::PolicyPreset::Cuda);
}

train::Precision cpu_autocast_precision(const std::string& name) {
  check_name(name);
  return name == "pytorch" ? train::Precision::Bf16 : train::Precision::Fp16;
}

}  // namespace mixtrain::cli
