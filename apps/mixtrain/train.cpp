// mixtrain train MODEL: trains an example model with the shared AMP loop, showing progress,
// logging every step as a JSON line (--log), checkpointing (--save, --resume), and printing a
// summary with the memory statistics.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iomanip>
#include <streambuf>
#include <iostream>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <mixtrain/mixtrain.h>

#include "args.h"
#include "commands.h"
#include "progress.h"
#include "tasks.h"

namespace mixtrain::cli {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// Flag values that the library parses: a bad one is a usage error (exit 2), like a bad number.
examples::Precision precision_flag(const Args& args) {
  const std::string v = args.str("precision", "fp16");
  if (v != "fp32" && v != "fp16" && v != "bf16")
    throw std::runtime_error("--precision expects fp32, fp16 or bf16, got '" + v + "'");
  return examples::parse_precision(v);
}

}  // namespace

Device device_flag(const Args& args) {
  if (!args.has("device")) return examples::default_device();
  const std::string v = args.str("device", "");
  if (v != "cpu" && v.rfind("cuda", 0) != 0) throw std::runtime_error("--device expects cpu or cuda, got '" + v + "'");
  return examples::parse_device(v);
}

int run_train(const std::vector<std::string>& argv) {
  const Args args(argv, {"precision", "device", "steps", "batch-size", "lr", "seed", "save", "resume", "log"},
                  {"synthetic", "channels-last"});
  if (args.positional().size() != 1)
    throw std::runtime_error(std::string("train expects one model (") + known_models() + ")" +
                             (args.positional().empty() ? "" : ", got '" + args.positional()[0] + "'" +
                                                                   (args.positional().size() > 1 ? " and more" : "")));
  // Under `mixtrain launch` (or torchrun, mpirun, Slurm) every rank trains its share; only rank 0
  // reports, so the output reads as one run's.
  struct NullBuf : std::streambuf {
    int overflow(int c) override { return c; }
  };
  static NullBuf discard;
  std::streambuf* const cout_buf = std::cout.rdbuf();
  if (distributed::read_launch_env().rank != 0) std::cout.rdbuf(&discard);
  struct Restore {
    std::streambuf* buf;
    ~Restore() { std::cout.rdbuf(buf); }
  } restore{cout_buf};
  TaskSpec spec;
  spec.model = args.positional()[0];
  check_model_name(spec.model);
  spec.device = device_flag(args);
  spec.batch_size = args.integer("batch-size", 0, 1);
  spec.seed = static_cast<uint64_t>(args.integer("seed", 0, 0));
  spec.synthetic = args.has("synthetic");
  spec.channels_last = args.has("channels-last");

  examples::TrainOptions options;
  options.precision = precision_flag(args);
  options.device = spec.device;
  options.steps = args.integer("steps", 200, 1);
  options.lr = args.number("lr", default_lr(spec.model));
  if (options.lr <= 0) throw std::runtime_error("--lr expects a positive number, got " + args.str("lr", ""));
  options.save_dir = args.str("save", "");
  options.resume_dir = args.str("resume", "");

  std::ofstream log;
  if (args.has("log") && distributed::read_launch_env().rank == 0) {
    log.open(args.str("log", ""), std::ios::trunc);
    if (!log) throw std::runtime_error("cannot write the log file " + args.str("log", ""));
  }

  const auto task = make_task(spec);
  std::cout << task->describe() << "\n"
            << "training " << options.steps << " steps, batch " << task->batch_size() << ", "
            << examples::precision_name(options.precision) << " on " << options.device << ", lr " << options.lr << "\n"
            << std::flush;
  std::unique_ptr<Progress> progress;
  const examples::TrainResult result = examples::train(*task, options, [&](const examples::StepRecord& r) {
    if (!progress)  // the first step tells where a resumed run starts
      progress = std::make_unique<Progress>(std::cout, ::isatty(::fileno(stdout)) != 0, r.step, options.steps);
    progress->update(r);
    if (log.is_open())
      log << nlohmann::json{{"step", r.step},     {"loss", r.loss},           {"scale", r.scale},
                            {"skipped", r.skipped}, {"grad_norm", r.grad_norm}, {"seconds", r.seconds}}
                 .dump()
          << "\n";
  });
  if (progress) progress->finish();

  if (result.records.empty()) {
    std::cout << "nothing to do: the checkpoint is at step " << result.first_step - 1 << " of " << options.steps << "\n";
    return 0;
  }
  const auto& st = result.memory;
  std::cout << std::fixed << std::setprecision(4) << "final loss " << result.records.back().loss << "; "
            << result.skipped_steps << " skipped steps of " << result.records.size() << "; " << std::setprecision(1)
            << result.seconds << " s (" << static_cast<double>(result.records.size()) / std::max(result.seconds, 1e-9)
            << " steps/s); peak memory allocated " << st.peak_allocated_bytes / kMiB << " MiB, reserved "
            << st.peak_reserved_bytes / kMiB << " MiB" << std::defaultfloat << "\n";
  const std::string eval = task->evaluate();
  if (!eval.empty()) std::cout << eval << "\n";
  if (!options.save_dir.empty()) std::cout << "checkpoint saved to " << options.save_dir << "\n";
  return 0;
}

}  // namespace mixtrain::cli
