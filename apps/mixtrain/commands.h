#pragma once
// The mixtrain tool's subcommands. Each returns the process exit code; errors are thrown
// (std::runtime_error for usage, mixtrain::Error from the library) and printed by main.
#include <string>
#include <vector>

#include <mixtrain/core/device.h>

namespace mixtrain::cli {

int run_train(const std::vector<std::string>& args);
int run_bench(const std::vector<std::string>& args);
int run_policy(const std::vector<std::string>& args);
int run_launch(const std::vector<std::string>& args);

class Args;
// --device, defaulting to CUDA when present (a bad value is a usage error).
Device device_flag(const Args& args);

}  // namespace mixtrain::cli
