#include "mixtrain/ops/op_list.h"

#include <array>
#include <atomic>
#include <cstring>
#include <string>

namespace mixtrain::amp {

const char* cast_policy_name(CastPolicy p) {
  switch (p) {
    case CastPolicy::LowerPrecision: return "lower_precision";
    case CastPolicy::Float32: return "fp32";
    case CastPolicy::Float32OptDtype: return "fp32_set_opt_dtype";
    case CastPolicy::Promote: return "promote";
    case CastPolicy::Banned: return "banned";
    case CastPolicy::Passthrough: return "passthrough";
  }
  return "unknown";
}

bool cast_policy_from_name(const std::string& name, CastPolicy* out) {
  for (CastPolicy p : {CastPolicy::LowerPrecision, CastPolicy::Float32, CastPolicy::Float32OptDtype,
                       CastPolicy::Promote, CastPolicy::Banned, CastPolicy::Passthrough}) {
    if (name == cast_policy_name(p)) {
      *out = p;
      return true;
    }
  }
  return false;
}

}  // namespace mixtrain::amp

namespace mixtrain::ops {

namespace {
constexpr const char* kNames[] = {
#define MT_OP_NAME(name, policy) #name,
    MT_FORALL_OPS(MT_OP_NAME)
#undef MT_OP_NAME
};
constexpr amp::CastPolicy kDefaults[] = {
#define MT_OP_POLICY(name, policy) amp::CastPolicy::policy,
    MT_FORALL_OPS(MT_OP_POLICY)
#undef MT_OP_POLICY
};
struct LiveTable {
  std::array<std::atomic<amp::CastPolicy>, kNumOps> entries;
  LiveTable() {
    for (int i = 0; i < kNumOps; ++i) entries[i].store(kDefaults[i]);
  }
};
std::array<std::atomic<amp::CastPolicy>, kNumOps>& live_table() {
  static LiveTable table;
  return table.entries;
}
}  // namespace

const char* op_name(OpId op) { return kNames[static_cast<int>(op)]; }

std::string backward_node_name(std::string_view op) {
  std::string out;
  bool upper = true;
  for (char c : op) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out += upper && c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c;
    upper = false;
  }
  return out + "Backward0";
}

const char* backward_name(OpId op) {
  static const std::array<std::string, kNumOps> names = [] {
    std::array<std::string, kNumOps> n;
    for (int i = 0; i < kNumOps; ++i) n[static_cast<size_t>(i)] = backward_node_name(kNames[i]);
    return n;
  }();
  return names[static_cast<size_t>(op)].c_str();
}

bool op_from_name(std::string_view name, OpId* out) {
  for (int i = 0; i < kNumOps; ++i) {
    if (name == kNames[i]) {
      *out = static_cast<OpId>(i);
      return true;
    }
  }
  return false;
}

amp::CastPolicy default_policy(OpId op) { return kDefaults[static_cast<int>(op)]; }
amp::CastPolicy policy(OpId op) { return live_table()[static_cast<int>(op)].load(std::memory_order_relaxed); }
void set_policy(OpId op, amp::CastPolicy p) { live_table()[static_cast<int>(op)].store(p); }
void reset_policies() {
  for (int i = 0; i < kNumOps; ++i) live_table()[i].store(kDefaults[i]);
}

}  // namespace mixtrain::ops
