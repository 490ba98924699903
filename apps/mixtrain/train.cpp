// mixtrain train MODEL: trains an example model with the shared AMP loop, showing progress,
// logging every step as a JSON line (--log), checkpointing (--save, --save-every, --resume), and
// printing a summary with the memory statistics. Every output is checked before training starts.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <stdexcept>
#include <streambuf>

#include <mixtrain/mixtrain.h>

#include "commands.h"
#include "common/cli.h"
#include "cpu_autocast.h"
#include "memory_predict.h"
#include "progress.h"
#include "step_log.h"
#include "tasks.h"

namespace mixtrain::cli {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

struct TrainFlags {
  TaskSpec spec;
  train::TrainOptions options;
  std::string log_path, cpu_autocast = "cuda";
};

std::unique_ptr<CLI::App> train_app(TrainFlags& f) {
  namespace flags = examples::cli;
  auto app = flags::make_app("mixtrain train", "Trains an example model with autocast, GradScaler and AdamW.");
  f.spec.device = train::default_device();
  f.options.steps = 200;
  app->add_option("model", f.spec.model, "mlp, unet or transformer")
      ->required()
      ->check(flags::one_of({"mlp", "unet", "transformer"}))
      ->type_name("MODEL");
  flags::add_precision_flag(*app, f.options.precision);
  flags::add_device_flag(*app, f.spec.device);
  app->add_option("--steps", f.options.steps, "train up to this step (a resumed run continues to it)")
      ->check(flags::integer_at_least(1))
      ->type_name("N");
  app->add_option("--batch-size", f.spec.batch_size, "samples per step")
      ->check(flags::integer_at_least(1))
      ->type_name("N")
      ->default_str("mlp 128, unet 8, transformer 16");
  app->add_option("--lr", f.options.lr, "peak learning rate (AdamW; the transformer warms up, then decays)")
      ->check(flags::finite_number(true))
      ->type_name("X");
  app->add_option("--seed", f.spec.seed, "seed of the weights and the data order")
      ->check(flags::unsigned_integer())
      ->type_name("N");
  app->add_flag("--synthetic", f.spec.synthetic, "generated data on the device, no dataset package needed");
  app->add_flag("--channels-last", f.spec.channels_last, "the UNet's images and activations in NHWC");
  app->add_flag("--checkpoint-activations", f.spec.checkpoint_activations,
                "recompute each UNet stage / transformer block in backward instead of keeping its activations");
  app->add_flag("--memory-plan", f.options.memory_plan,
                "serve each step's buffers from a static plan per batch shape (docs/MEMORY.md)");
  app->add_option("--save", f.options.save_dir, "checkpoint directory, written at the end (checked before training)")
      ->type_name("DIR")
      ->default_str("none");
  app->add_option("--save-every", f.options.save_every, "also checkpoint every N steps (0: only at the end)")
      ->check(flags::integer_at_least(0))
      ->type_name("N");
  app->add_option("--resume", f.options.resume_dir, "continue from this checkpoint (to --steps)")
      ->type_name("DIR")
      ->default_str("none");
  app->add_option("--zero", f.options.zero_stage,
                  "under a launcher, 1 shards AdamW's state (and master weights) across the ranks: ZeRO-1")
      ->check(flags::integer_in(0, 1))
      ->type_name("STAGE")
      ->default_str("0");
  app->add_flag("--checkpoint-sharded", f.options.checkpoint_sharded,
                "with --zero 1, each rank saves its own shard of AdamW's state (the ranks share --save's disk)");
  app->add_option("--log", f.log_path, "one JSON object per step (step, loss, lr, scale, memory, ...)")
      ->type_name("FILE")
      ->default_str("none");
  app->add_option("--cpu-autocast", f.cpu_autocast,
                  "CPU autocast: cuda (the CUDA lists and fp16, as on a GPU) or pytorch (torch's CPU lists, "
                  "bf16 unless --precision says otherwise)")
      ->check(flags::one_of(cpu_autocast_presets()))
      ->type_name("cuda|pytorch");
  return app;
}

// Under `mixtrain launch` (or torchrun, mpirun, Slurm) every rank trains its share; only rank 0
// reports, so the output reads as one run's.
struct QuietUnlessRankZero {
  struct NullBuf : std::streambuf {
    int overflow(int c) override { return c; }
  } discard;
  std::streambuf* const saved = std::cout.rdbuf();
  QuietUnlessRankZero() {
    if (distributed::read_launch_env().rank != 0) std::cout.rdbuf(&discard);
  }
  ~QuietUnlessRankZero() { std::cout.rdbuf(saved); }
};

// --rank-batches auto under a launcher: each rank's share of the global batch sized to its memory
// by the library's dry-run fit (train::rank_weights_by_memory), before the real task takes any of
// it. Empty without it or without a launcher. The launcher's variables, wrong, are usage errors
// here: they come from its flags.
std::vector<double> memory_sized_rank_weights(const TaskSpec& spec, const train::TrainOptions& options,
                                              int64_t global_batch, std::string* report) {
  try {
    distributed::launch_rank_shares(distributed::read_launch_env().world_size);
  } catch (const Error& e) {
    throw examples::cli::UsageError(e.what());
  }
  StepQuery query;
  query.spec = spec;
  query.precision = options.precision;
  query.target = spec.device;
  query.zero_stage = options.zero_stage;  // --zero 1: each rank plans for AdamW's state of its shard only
  return train::rank_weights_by_memory(task_factory(spec), library_query(query), global_batch, 0, report);
}

// --batch-size, or the model's default (read off a task built on meta, weights uninitialised).
int64_t global_batch_size(TaskSpec spec) {
  if (spec.batch_size > 0) return spec.batch_size;
  spec.device = Device::meta();
  spec.synthetic = true;
  nn::init::SkipInitGuard skip_init;
  return make_task(spec)->batch_size();
}

}  // namespace

int run_train(const std::vector<std::string>& argv) {
  TrainFlags f;
  f.options.lr = default_lr("mlp");
  const auto app = train_app(f);
  if (!examples::cli::parse(*app, argv, std::cout)) return 0;
  if (app->count("--lr") == 0) f.options.lr = default_lr(f.spec.model);
  const QuietUnlessRankZero quiet;
  TaskSpec& spec = f.spec;
  train::TrainOptions& options = f.options;
  options.device = spec.device;
  if (f.cpu_autocast != "cuda") {
    if (!spec.device.is_cpu())
      throw examples::cli::UsageError("--cpu-autocast " + f.cpu_autocast + " is for CPU training, not --device " +
                                      spec.device.str() + "; add --device cpu");
    if (app->count("--precision") == 0) options.precision = cpu_autocast_precision(f.cpu_autocast);
  }
  apply_cpu_autocast_preset(f.cpu_autocast);

  // Outputs first: a long run must not end in "cannot write".
  const bool rank0 = distributed::read_launch_env().rank == 0;
  if (!options.save_dir.empty() && rank0) io::check_checkpoint_destination(options.save_dir);
  std::ofstream log;
  if (!f.log_path.empty() && rank0) {
    // A run its launcher restarted (--max-restarts) goes on with the log it began.
    log.open(f.log_path, distributed::read_launch_env().restart_count > 0 ? std::ios::app : std::ios::trunc);
    if (!log) throw std::runtime_error("cannot write the log file " + f.log_path);
  }

  // --rank-batches auto (under a launcher): each rank's share sized to its memory by dry run,
  // before the real task takes any of it.
  std::string rank_report;
  if (std::getenv(distributed::kRankBatchesEnv))
    options.rank_weights = memory_sized_rank_weights(spec, options, global_batch_size(spec), &rank_report);

  const auto task = make_task(spec);
  if (!rank_report.empty()) std::cout << rank_report << "\n";
  std::cout << task->describe() << "\n"
            << "training " << options.steps << " steps, batch " << task->batch_size() << ", "
            << train::precision_name(options.precision) << " on " << options.device << ", lr " << options.lr
            << (f.cpu_autocast != "cuda" ? ", CPU autocast preset " + f.cpu_autocast : std::string()) << "\n"
            << std::flush;
  std::unique_ptr<Progress> progress;
  const bool terminal = ::isatty(::fileno(stdout)) != 0;
  const train::TrainResult result = train::train(*task, options, [&](const train::StepRecord& r) {
    if (!progress)  // the first step tells where a resumed run starts
      progress = std::make_unique<Progress>(std::cout, terminal, terminal_columns(::fileno(stdout)), r.step,
                                            options.steps);
    progress->update(r);
    // Rank 0 logs. Elastic: whoever is rank 0 now (the first generation's rank 0 truncated the
    // file; a survivor that takes over appends to it).
    if (r.rank == 0 && !log.is_open() && !f.log_path.empty()) log.open(f.log_path, std::ios::app);
    if (r.rank == 0 && log.is_open())
      log << step_log_line(r, task->batch_size(), memory::stats(options.device), std::chrono::system_clock::now()).dump()
          << "\n" << std::flush;
  });
  if (progress) progress->finish();

  if (!result.resumed_from.empty())
    std::cout << "resumed from " << result.resumed_from << " at step " << result.first_step - 1
              << (distributed::read_launch_env().restart_count > 0
                      ? " (restart " + std::to_string(distributed::read_launch_env().restart_count) + ")"
                      : std::string())
              << "\n";
  if (result.records.empty()) {
    std::cout << "nothing to do: the checkpoint is at step " << result.first_step - 1 << " of " << options.steps << "\n";
    return 0;
  }
  const auto& st = result.memory;
  std::cout << std::fixed << std::setprecision(4) << "final loss " << result.records.back().loss << "; "
            << result.skipped_steps << " skipped steps of " << result.records.size() << "; " << std::setprecision(1)
            << result.seconds << " s (" << static_cast<double>(result.records.size()) / std::max(result.seconds, 1e-9)
            << " steps/s); peak memory allocated " << st.peak_allocated_bytes / kMiB << " MiB, reserved "
            << st.peak_reserved_bytes / kMiB << " MiB; optimizer state " << result.optimizer_state_bytes
            << " B" << std::defaultfloat;
  if (options.memory_plan)
    std::cout << "; memory plan: " << result.memory_plans << " plans, " << result.plan_hits << " arena hits, "
              << result.plan_misses << " missed steps";
  std::cout << "\n";
  if (options.precision == train::Precision::Fp8) {
    int64_t saturated[3] = {0, 0, 0};
    for (const amp::Fp8LayerStats& l : result.fp8_layers)
      for (int j = 0; j < 3; ++j) saturated[j] += l.saturated[j];
    std::cout << "FP8: " << result.fp8_layers.size() << " of " << result.linear_layers
              << " Linear layers in FP8 (the others' sizes are not multiples of 16: bf16); values clamped in the "
                 "last step: inputs "
              << saturated[0] << ", weights " << saturated[1] << ", gradients " << saturated[2] << "\n";
  }
  const std::string eval = task->evaluate();
  if (!eval.empty()) std::cout << eval << "\n";
  if (!options.save_dir.empty()) std::cout << "checkpoint saved to " << options.save_dir << "\n";
  return 0;
}

}  // namespace mixtrain::cli
