#pragma once
// The autocast policy table as data: every op mixtrain has and the CastPolicy autocast applies
// to it. The table itself lives in the ops layer (ops/op_list.h, the defaults follow PyTorch's
// CUDA lists); this is the amp-level view of it: read, override, dump to and load from JSON.
//
// JSON format: one object, op name -> policy name, e.g.
//   {"matmul": "lower_precision", "softmax": "fp32_set_opt_dtype", "exp": "fp32", ...}
// Policy names: lower_precision, fp32, fp32_set_opt_dtype, promote, banned, passthrough.
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "mixtrain/ops/cast_policy_enum.h"

namespace mixtrain::amp {

constexpr int kNumCastPolicies = static_cast<int>(CastPolicy::Passthrough) + 1;

struct PolicyEntry {
  std::string op;
  CastPolicy policy;
};

// Every op, in op-table order, with its current policy.
std::vector<PolicyEntry> policy_table();

// Current policy of one op; an unknown op name throws mixtrain::Error.
CastPolicy policy_of(std::string_view op);

// Overrides one op's policy (process-wide, all threads); an unknown op name throws.
void set_policy(std::string_view op, CastPolicy policy);

// Back to the defaults of ops/op_list.h.
void reset_policy_table();

// {"op": "policy name", ...} for every op.
nlohmann::json policy_table_to_json();

// Applies the entries of a JSON object on top of the current table (ops it does not name keep
// their policy). The whole document is checked first: a value that is not an object, an unknown
// op, an unknown policy name or a non-string value throws mixtrain::Error naming the entry, and
// nothing is applied.
void load_policy_table(const nlohmann::json& doc);

// The same from a file; a missing file or invalid JSON throws naming the path. (A distinct name,
// because a string converts to nlohmann::json too.)
void load_policy_table_file(const std::string& path);

// Named tables to start from.
//   Cuda: the defaults (ops/op_list.h), PyTorch's CUDA autocast lists, which mixtrain applies on
//     the CPU too, so the CPU backend reproduces a GPU run's numerics.
//   TorchCpu: PyTorch's own CPU autocast lists (torch.autocast("cpu"); KERNEL_CPU in
//     aten/src/ATen/autocast_mode.cpp), for the ops mixtrain has: the matrix products,
//     convolutions and attention in the low-precision type, the losses in fp32, cat and stack
//     promoted, every other op as its inputs come (docs/REFERENCE_AMP.md). PyTorch runs them in
//     bf16 by default.
enum class PolicyPreset { Cuda, TorchCpu };
const char* policy_preset_name(PolicyPreset preset);  // "cuda", "torch_cpu"

// Replaces the whole table with the preset's (process-wide, as set_policy).
void apply_policy_preset(PolicyPreset preset);

}  // namespace mixtrain::amp
