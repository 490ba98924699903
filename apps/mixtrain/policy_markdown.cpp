#include "policy_markdown.h"

#include <map>
#include <vector>

#include <mixtrain/mixtrain.h>

namespace mixtrain::cli {

std::string policy_markdown_table() {
  std::map<int, std::vector<std::string>> by_policy;
  for (const amp::PolicyEntry& e : amp::policy_table())
    if (e.policy != amp::CastPolicy::Passthrough) by_policy[static_cast<int>(e.policy)].push_back(e.op);
  std::string out = "| policy | ops |\n| --- | --- |\n";
  for (const auto& [policy, ops] : by_policy) {
    out += std::string("| ") + amp::cast_policy_name(static_cast<amp::CastPolicy>(policy)) + " | ";
    for (size_t i = 0; i < ops.size(); ++i) out += (i ? ", " : "") + ops[i];
    out += " |\n";
  }
  return out;
}

}  // namespace mixtrain::cli
