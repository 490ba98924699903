// mixtrain policy: the autocast cast policy of every op, as a table or as JSON.
#include <iomanip>
#include <iostream>

#include <nlohmann/json.hpp>
#include <mixtrain/mixtrain.h>

#include "args.h"
#include "commands.h"

namespace mixtrain::cli {

int run_policy(const std::vector<std::string>& argv) {
  const Args args(argv, {"load"}, {"json"});
  if (!args.positional().empty()) throw std::runtime_error("unexpected argument '" + args.positional()[0] + "'");
  if (args.has("load")) amp::load_policy_table_file(args.str("load", ""));
  if (args.has("json")) {
    std::cout << amp::policy_table_to_json().dump(2) << "\n";
    return 0;
  }
  std::cout << std::left << std::setw(36) << "op" << "policy\n";
  for (const auto& entry : amp::policy_table())
    std::cout << std::setw(36) << entry.op << amp::cast_policy_name(entry.policy) << "\n";
  return 0;
}

}  // namespace mixtrain::cli
