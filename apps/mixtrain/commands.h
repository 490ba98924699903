#pragma once
// The mixtrain tool's subcommands. Each parses its own flags (common/cli.h: `--help` prints them
// and returns 0) and returns the process exit code; errors are thrown (std::runtime_error,
// including cli::UsageError, for usage; mixtrain::Error from the library) and printed by main.
#include <string>
#include <vector>

namespace mixtrain::cli {

int run_train(const std::vector<std::string>& args);
int run_bench(const std::vector<std::string>& args);
int run_policy(const std::vector<std::string>& args);
int run_launch(const std::vector<std::string>& args);
int run_plot(const std::vector<std::string>& args);
int run_memory(const std::vector<std::string>& args);

}  // namespace mixtrain::cli
