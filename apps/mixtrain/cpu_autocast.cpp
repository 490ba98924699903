#include "cpu_autocast.h"

#include <algorithm>
#include <stdexcept>

#include <mixtrain/mixtrain.h>

namespace mixtrain::cli {

namespace {

// PyTorch's CPU autocast lists (aten/src/ATen/autocast_mode.cpp, KERNEL_CPU), restricted to the
// ops mixtrain has; docs/REFERENCE_AMP.md describes them.
const char* const kLowerPrecision[] = {"matmul", "bmm", "linear", "conv2d", "conv_transpose2d",
                                       "scaled_dot_product_attention"};
const char* const kFp32[] = {"mse_loss", "nll_loss", "cross_entropy", "binary_cross_entropy",
                             "binary_cross_entropy_with_logits"};
const char* const kPromote[] = {"cat", "stack"};

template <size_t N>
bool listed(const char* const (&list)[N], const std::string& op) {
  return std::find_if(std::begin(list), std::end(list), [&](const char* s) { return op == s; }) != std::end(list);
}

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
  amp::reset_policy_table();
  if (name == "cuda") return;
  for (const amp::PolicyEntry& e : amp::policy_table()) {
    amp::CastPolicy p = amp::CastPolicy::Passthrough;
    if (listed(kLowerPrecision, e.op)) p = amp::CastPolicy::LowerPrecision;
    else if (listed(kFp32, e.op)) p = amp::CastPolicy::Float32;
    else if (listed(kPromote, e.op)) p = amp::CastPolicy::Promote;
    amp::set_policy(e.op, p);
  }
}

examples::Precision cpu_autocast_precision(const std::string& name) {
  check_name(name);
  return name == "pytorch" ? examples::Precision::Bf16 : examples::Precision::Fp16;
}

}  // namespace mixtrain::cli
