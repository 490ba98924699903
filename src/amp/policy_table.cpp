// The policy table seen from amp: listing, per-op overrides, JSON dump and load.
#include <algorithm>
#include <iterator>
#include <string_view>
#include <utility>
#include <vector>

#include "core/input_file.h"
#include "core/json_limits.h"
#include "mixtrain/amp/cast_policy.h"
#include "mixtrain/base/error.h"
#include "mixtrain/core/file_reader.h"
#include "mixtrain/ops/op_list.h"

namespace mixtrain::amp {

namespace {

ops::OpId op_or_throw(const char* what, std::string_view op) {
  ops::OpId id;
  MT_CHECK(ops::op_from_name(op, &id), what, ": unknown op \"", op, "\" (amp::policy_table() lists the ops)");
  return id;
}

std::string policy_names() {
  std::string s;
  for (int p = 0; p < kNumCastPolicies; ++p) {
    s += (p ? ", " : "");
    s += cast_policy_name(static_cast<CastPolicy>(p));
  }
  return s;
}

// PyTorch's CPU autocast lists (KERNEL_CPU in aten/src/ATen/autocast_mode.cpp), for the ops
// mixtrain has.
constexpr const char* kTorchCpuLowerPrecision[] = {"matmul", "bmm", "linear", "conv2d", "conv_transpose2d",
                                                   "scaled_dot_product_attention"};
constexpr const char* kTorchCpuFp32[] = {"mse_loss", "nll_loss", "cross_entropy", "binary_cross_entropy",
                                         "binary_cross_entropy_with_logits"};
constexpr const char* kTorchCpuPromote[] = {"cat", "stack"};

template <size_t N>
bool listed(const char* const (&list)[N], std::string_view op) {
  return std::find(std::begin(list), std::end(list), op) != std::end(list);
}

CastPolicy torch_cpu_policy(std::string_view op) {
  if (listed(kTorchCpuLowerPrecision, op)) return CastPolicy::LowerPrecision;
  if (listed(kTorchCpuFp32, op)) return CastPolicy::Float32;
  if (listed(kTorchCpuPromote, op)) return CastPolicy::Promote;
  return CastPolicy::Passthrough;
}

}  // namespace

const char* policy_preset_name(PolicyPreset preset) {
  switch (preset) {
    case PolicyPreset::Cuda: return "cuda";
    case PolicyPreset::TorchCpu: return "torch_cpu";
  }
  return "?";
}

void apply_policy_preset(PolicyPreset preset) {
  ops::reset_policies();
  if (preset == PolicyPreset::Cuda) return;
  MT_CHECK(preset == PolicyPreset::TorchCpu, "amp::apply_policy_preset: invalid preset value ",
           static_cast<int>(preset));
  for (int i = 0; i < ops::kNumOps; ++i) {
    const auto id = static_cast<ops::OpId>(i);
    ops::set_policy(id, torch_cpu_policy(ops::op_name(id)));
  }
}

std::vector<PolicyEntry> policy_table() {
  std::vector<PolicyEntry> table;
  table.reserve(ops::kNumOps);
  for (int i = 0; i < ops::kNumOps; ++i) {
    const auto id = static_cast<ops::OpId>(i);
    table.push_back({ops::op_name(id), ops::policy(id)});
  }
  return table;
}

CastPolicy policy_of(std::string_view op) { return ops::policy(op_or_throw("amp::policy_of", op)); }

void set_policy(std::string_view op, CastPolicy policy) {
  const ops::OpId id = op_or_throw("amp::set_policy", op);
  MT_CHECK(static_cast<int>(policy) < kNumCastPolicies,
           "amp::set_policy(\"", op, "\"): invalid policy value ", static_cast<int>(policy));
  ops::set_policy(id, policy);
}

void reset_policy_table() { ops::reset_policies(); }

nlohmann::json policy_table_to_json() {
  nlohmann::json j = nlohmann::json::object();
  for (const PolicyEntry& e : policy_table()) j[e.op] = cast_policy_name(e.policy);
  return j;
}

void load_policy_table(const nlohmann::json& doc) {
  mixtrain::detail::check_json_depth(doc, "load_policy_table");
  MT_CHECK(doc.is_object(), "load_policy_table: expected a JSON object {\"op\": \"policy\", ...}, got ", doc.type_name(),
           "; nothing was applied");
  // Check everything first, apply after: a bad file must not leave the table half-changed.
  std::vector<std::pair<ops::OpId, CastPolicy>> parsed;
  for (const auto& [key, value] : doc.items()) {
    ops::OpId id;
    MT_CHECK(ops::op_from_name(key, &id), "load_policy_table: entry \"", key, "\": unknown op \"", key,
             "\" (amp::policy_table() lists the ops); nothing was applied");
    MT_CHECK(value.is_string(), "load_policy_table: entry \"", key, "\": the policy must be a string, got ",
             value.type_name(), " ", mixtrain::detail::json_excerpt(value), "; nothing was applied");
    CastPolicy policy;
    MT_CHECK(cast_policy_from_name(value.get<std::string>(), &policy), "load_policy_table: entry \"", key,
             "\": unknown policy ", mixtrain::detail::json_excerpt(value), " (expected one of ", policy_names(), "); nothing was applied");
    parsed.emplace_back(id, policy);
  }
  for (const auto& [id, policy] : parsed) ops::set_policy(id, policy);
}

void load_policy_table_file(const std::string& path) {
  const std::string who = "load_policy_table_file: \"" + path + "\"";
  std::string text;
  try {
    text = read_file(path, "load_policy_table_file", detail::kMaxTextFileBytes);
  } catch (const Error& e) {
    MT_ERROR(e.what(), "; nothing was applied");
  }
  const nlohmann::json doc = [&] {
    try {
      return detail::parse_json_bounded(text, who);
    } catch (const Error& e) {
      MT_ERROR(e.what(), "; nothing was applied");
    }
  }();
  try {
    load_policy_table(doc);
  } catch (const Error& e) {
    MT_ERROR(path, ": ", e.what());
  }
}

}  // namespace mixtrain::amp
