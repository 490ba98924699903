// mixtrain: train the example models, benchmark fp32 against AMP, show the autocast policy,
// launch data-parallel ranks, plot a training log, predict a step's memory. Each command parses its own flags
// (`mixtrain COMMAND --help`).
#include <iostream>
#include <stdexcept>

#include <mixtrain/config.h>
#include <mixtrain/mixtrain.h>

#include "commands.h"

namespace {

const char* kUsage =
    "usage: mixtrain <command> [options]   (mixtrain <command> --help lists its flags and defaults)\n"
    "  train MODEL   train mlp, unet or transformer with AMP: progress, JSONL log, checkpoints\n"
    "  bench         each model in fp32, fp16 and bf16: step time, memory, loss (JSON and SVG)\n"
    "  policy        the autocast cast policy of every op (--load FILE applies a table first)\n"
    "  launch        run a program as N data-parallel ranks on this host\n"
    "  plot LOG      draw a training log (train --log) as an SVG: loss, loss scale, learning rate\n"
    "  memory MODEL  predicted peak memory of a training step by dry run; --fit SIZE finds a batch\n"
    "  --version     the version and whether the CUDA backend is compiled in\n";

struct Command {
  const char* name;
  int (*run)(const std::vector<std::string>&);
};
constexpr Command kCommands[] = {{"train", mixtrain::cli::run_train},
                                 {"bench", mixtrain::cli::run_bench},
                                 {"policy", mixtrain::cli::run_policy},
                                 {"launch", mixtrain::cli::run_launch},
                                 {"plot", mixtrain::cli::run_plot},
                                 {"memory", mixtrain::cli::run_memory}};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << kUsage;
    return 2;
  }
  std::string command = argv[1];
  std::vector<std::string> rest(argv + 2, argv + argc);
  if (command == "--help" || command == "-h" || (command == "help" && rest.empty())) {
    std::cout << kUsage;
    return 0;
  }
  if (command == "help") {  // `mixtrain help train` is `mixtrain train --help`
    command = rest[0];
    rest = {"--help"};
  }
  if (command == "--version" || command == "version") {
#ifdef MIXTRAIN_WITH_CUDA
    std::cout << "mixtrain " MIXTRAIN_VERSION " (CUDA backend compiled in)\n";
#else
    std::cout << "mixtrain " MIXTRAIN_VERSION " (CPU only)\n";
#endif
    return 0;
  }
  for (const Command& c : kCommands) {
    if (command != c.name) continue;
    try {
      return c.run(rest);
    } catch (const mixtrain::Error& e) {
      std::cerr << "mixtrain " << command << ": " << e.what() << "\n";
      return 1;
    } catch (const std::exception& e) {  // usage errors
      std::cerr << "mixtrain " << command << ": " << e.what() << "\n";
      return 2;
    }
  }
  std::cerr << "mixtrain: unknown command '" << command << "' (see mixtrain --help)\n";
  return 2;
}
