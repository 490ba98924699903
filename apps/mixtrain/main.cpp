// mixtrain: train the example models, benchmark fp32 against AMP, show the autocast policy.
#include <algorithm>
#include <iostream>
#include <stdexcept>

#include <mixtrain/config.h>
#include <mixtrain/mixtrain.h>

#include "commands.h"

namespace {
const char* kUsage =
    "usage: mixtrain <command> [options]\n"
    "  train mlp|unet|transformer [--precision fp32|fp16|bf16] [--device cpu|cuda] [--steps N]\n"
    "        [--batch-size N] [--lr X] [--seed N] [--save DIR] [--resume DIR] [--log FILE] [--synthetic]\n"
    "        [--channels-last]\n"
    "  bench [--models mlp,unet,transformer] [--precisions fp32,fp16,bf16] [--device cpu|cuda] [--steps N]\n"
    "        [--warmup N] [--size tiny|full] [--out DIR] [--reference FILE.json] [--fp32-math default|strict]\n"
    "        [--channels-last]\n"
    "  policy [--json]\n"
    "  launch --nproc N [--rank-weights W0,W1,...] -- PROGRAM [ARGS...]   (data-parallel ranks on this host)\n"
    "  --version\n";
}

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command == "--version" || command == "version") {
#ifdef MIXTRAIN_WITH_CUDA
    std::cout << "mixtrain " MIXTRAIN_VERSION " (CUDA backend compiled in)\n";
#else
    std::cout << "mixtrain " MIXTRAIN_VERSION " (CPU only)\n";
#endif
    return 0;
  }
  const std::vector<std::string> rest(argv + 2, argv + argc);
  if (command == "launch" && (rest.empty() || rest[0] != "--help")) {
    // Everything after `--` belongs to the program, --help included.
    try {
      return mixtrain::cli::run_launch(rest);
    } catch (const std::exception& e) {
      std::cerr << "mixtrain launch: " << e.what() << "\n";
      return 2;
    }
  }
  // `mixtrain help` and `mixtrain <command> --help` print the usage too, with success.
  if (command == "help" || std::find(rest.begin(), rest.end(), "--help") != rest.end() ||
      std::find(rest.begin(), rest.end(), "-h") != rest.end()) {
    std::cout << kUsage;
    return 0;
  }
  try {
    if (command == "train") return mixtrain::cli::run_train(rest);
    if (command == "bench") return mixtrain::cli::run_bench(rest);
    if (command == "policy") return mixtrain::cli::run_policy(rest);
    std::cerr << "mixtrain: unknown command '" << command << "'\n" << kUsage;
    return 2;
  } catch (const mixtrain::Error& e) {
    std::cerr << "mixtrain " << command << ": " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "mixtrain " << command << ": " << e.what() << "\n";
    return 2;
  }
}
