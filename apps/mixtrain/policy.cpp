// mixtrain policy: the autocast cast policy of every op, as a table or as JSON, after an optional
// preset (--cpu-autocast) and table file (--load, in the JSON format --json writes); --markdown
// gives the table docs/AUTOCAST.md shows.
#include <iomanip>
#include <iostream>

#include <nlohmann/json.hpp>
#include <mixtrain/mixtrain.h>

#include "commands.h"
#include "common/cli.h"
#include "cpu_autocast.h"
#include "policy_markdown.h"

namespace mixtrain::cli {

int run_policy(const std::vector<std::string>& argv) {
  namespace flags = examples::cli;
  std::string load, preset = "cuda";
  bool json = false, markdown = false;
  const auto app = flags::make_app("mixtrain policy", "The autocast cast policy of every op (one table for CPU and CUDA).");
  app->add_option("--load", load,
                  "apply this JSON table on top ({\"op\": \"policy\", ...}, as --json prints; ops it does not name "
                  "keep their policy)")
      ->type_name("FILE")
      ->default_str("none");
  app->add_option("--cpu-autocast", preset, "start from a preset: cuda (mixtrain's lists) or pytorch (torch's CPU lists)")
      ->check(flags::one_of(cpu_autocast_presets()))
      ->type_name("cuda|pytorch");
  app->add_flag("--json", json, "print JSON instead of a table");
  app->add_flag("--markdown", markdown, "print the non-passthrough ops by policy, as docs/AUTOCAST.md shows them");
  if (!flags::parse(*app, argv, std::cout)) return 0;
  apply_cpu_autocast_preset(preset);
  if (!load.empty()) amp::load_policy_table_file(load);
  if (markdown) {
    std::cout << policy_markdown_table();
    return 0;
  }
  if (json) {
    std::cout << amp::policy_table_to_json().dump(2) << "\n";
    return 0;
  }
  std::cout << std::left << std::setw(36) << "op" << "policy\n";
  for (const auto& entry : amp::policy_table())
    std::cout << std::setw(36) << entry.op << amp::cast_policy_name(entry.policy) << "\n";
  return 0;
}

}  // namespace mixtrain::cli
