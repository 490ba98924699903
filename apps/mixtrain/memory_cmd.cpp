// mixtrain memory MODEL: the predicted peak allocated and reserved bytes of one training step of an
// example model and what they are made of, by dry run only (a CUDA step is planned without a
// GPU); --fit SIZE searches the largest batch that fits, --measure runs the step for real beside
// the prediction, --timeline draws the live bytes and the arena layout.
#include <chrono>
#include <iomanip>
#include <iostream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "common/cli.h"
#include "memory_predict.h"
#include "memory_timeline.h"

namespace mixtrain::cli {

namespace {

struct MemoryFlags {
  StepQuery query;
  std::string precision = "fp32", device = "cpu", size = "tiny", fit, timeline;
  bool json = false, measure = false;
};

std::unique_ptr<CLI::App> memory_app(MemoryFlags& f) {
  namespace flags = examples::cli;
  auto app = flags::make_app("mixtrain memory",
                             "Predicted peak memory of one training step (forward, backward, AdamW) by dry run: "
                             "nothing is computed and the device is not touched.");
  app->add_option("model", f.query.spec.model, "mlp, unet or transformer")
      ->required()
      ->check(flags::one_of({"mlp", "unet", "transformer"}))
      ->type_name("MODEL");
  app->add_option("--batch-size", f.query.spec.batch_size, "samples per step")
      ->check(flags::integer_at_least(1))
      ->type_name("N")
      ->default_str("the --size preset's");
  app->add_option("--precision", f.precision,
                  "fp32, or autocast fp16 (with a GradScaler) or bf16, or fp8 (the Linear layers in FP8: their fp8 "
                  "copies and scaling state are shown)")
      ->check(flags::one_of({"fp32", "fp16", "bf16", "fp8"}))
      ->type_name("P");
  app->add_option("--device", f.device, "the target: cpu or cuda (planned without a GPU)")
      ->check(flags::one_of({"cpu", "cuda"}))
      ->type_name("D");
  app->add_option("--size", f.size, "model preset, as mixtrain bench's: tiny, small or full")
      ->check(flags::one_of({"tiny", "small", "full"}))
      ->type_name("tiny|small|full");
  app->add_flag("--checkpoint-activations", f.query.spec.checkpoint_activations,
                "recompute each UNet stage / transformer block in backward");
  app->add_flag("--json", f.json, "one JSON object instead of the table");
  app->add_option("--fit", f.fit, "the largest batch whose predicted peak fits in SIZE (8GiB, 512MiB, bytes)")
      ->type_name("SIZE")
      ->default_str("none");
  app->add_flag("--measure", f.measure, "also run the step for real and show its measured peaks");
  app->add_option("--world-size", f.query.world_size,
                  "predict rank 0 of this many data-parallel ranks: its share of --batch-size (the global batch)")
      ->check(flags::integer_in(1, 1 << 20))
      ->type_name("N")
      ->default_str("1");
  app->add_option("--zero", f.query.zero_stage,
                  "1: ZeRO-1, AdamW's state (and master weights) sharded over the --world-size ranks")
      ->check(flags::integer_in(0, 1))
      ->type_name("STAGE")
      ->default_str("0");
  app->add_option("--timeline", f.timeline, "draw live bytes over the step and the arena layout as SVG")
      ->type_name("FILE.svg")
      ->default_str("none");
  return app;
}

// The batch of the task a spec builds when none is given (read off a task built on meta).
int64_t preset_batch_size(TaskSpec spec) {
  spec.device = Device::meta();
  spec.synthetic = true;
  nn::init::SkipInitGuard skip_init;
  return make_task(spec)->batch_size();
}

constexpr const char* kRoleLabels[memory::kNumRoles] = {
    "parameters", "gradients", "optimizer state", "master weights", "activations",
    "temporaries", "workspace", "input",           "fp8 copies",     "fp8 scaling state"};

void print_row(std::ostream& out, const std::string& name, int64_t bytes, const std::string& note = "") {
  out << "  " << std::left << std::setw(28) << name << std::right << std::setw(12) << memory::format_bytes(bytes) << "  "
      << std::setw(15) << bytes << " B" << (note.empty() ? "" : "  " + note) << "\n";
}

}  // namespace

int run_memory(const std::vector<std::string>& argv) {
  MemoryFlags f;
  const auto app = memory_app(f);
  if (!examples::cli::parse(*app, argv, std::cout)) return 0;
  StepQuery& q = f.query;
  q.precision = train::parse_precision(f.precision);
  q.target = f.device == "cuda" ? Device::cuda(0) : Device::cpu();
  q.spec.size = parse_task_size(f.size);
  q.spec.device = q.target;
  const int64_t fit_limit = f.fit.empty() ? 0 : parse_byte_size(f.fit, "--fit");
  if (f.measure && q.target.is_cuda() && !train::default_device().is_cuda())
    throw examples::cli::UsageError("--measure --device cuda needs a GPU; none is usable here");
  if (!f.timeline.empty()) check_timeline_path(f.timeline);
  const int world = q.world_size;
  if (world > 1 && (fit_limit > 0 || f.measure))
    throw examples::cli::UsageError("--world-size predicts one rank of a data-parallel job; --fit and --measure are "
                                    "for one process");
  if (world > 1) {
    // Rank 0's share of the global batch, split evenly as the trainers split it.
    const int64_t global = q.spec.batch_size > 0 ? q.spec.batch_size : preset_batch_size(q.spec);
    const std::vector<int64_t> rows = distributed::DistributedSampler::split(global, std::vector<double>(world, 1.0));
    if (rows[static_cast<size_t>(world - 1)] < 1)
      throw examples::cli::UsageError("--batch-size " + std::to_string(global) + " leaves a rank of " +
                                      std::to_string(world) + " no samples");
    q.global_batch_size = global;
    q.spec.batch_size = rows[0];
  }

  StepPrediction p;
  FitResult fit;
  double fit_ms = 0;
  if (fit_limit > 0) {
    const auto start = std::chrono::steady_clock::now();
    fit = fit_batch(q, fit_limit);
    fit_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!fit.fits) {
      const std::string size = f.fit + " (" + std::to_string(fit_limit) + " B)";
      if (fit.best.persistent_bytes > fit_limit)
        std::cerr << "mixtrain memory: --fit " << size << " is smaller than the step's persistent bytes alone ("
                  << memory::format_bytes(fit.best.persistent_bytes) << ", " << fit.best.persistent_bytes
                  << " B: weights, optimizer state, data at batch " << fit.best.batch_size << "); no batch fits\n";
      else
        std::cerr << "mixtrain memory: --fit " << size << ": even batch " << fit.over_batch << " reserves "
                  << memory::format_bytes(fit.over_reserved_bytes) << " (" << fit.over_reserved_bytes << " B; allocated "
                  << memory::format_bytes(fit.over_peak_bytes) << "); no batch fits\n";
      return 1;
    }
    p = std::move(fit.best);
    q.spec.batch_size = p.batch_size;
  } else {
    p = predict_step(q);
  }
  const int64_t reserved = p.reserved_bytes;
  const std::vector<memory::BufferLifetime> lifetimes = p.trace.lifetimes();
  const int64_t arena = arena_bytes(lifetimes);
  StepMeasurement measured;
  if (f.measure) measured = measure_step(q);
  if (!f.timeline.empty()) write_timeline(f.timeline, p.trace, arena_layout(lifetimes), q.spec.model + " step");

  const auto peak_roles = p.trace.peak_by_role();
  if (f.json) {
    nlohmann::json doc = {{"model", q.spec.model},
                          {"size", f.size},
                          {"precision", f.precision},
                          {"device", q.target.str()},
                          {"batch_size", p.batch_size},
                          {"checkpoint_activations", q.spec.checkpoint_activations},
                          {"world_size", world},
                          {"zero", q.zero_stage},
                          {"global_batch_size", world > 1 ? q.global_batch_size : p.batch_size},
                          {"peak_bytes", p.peak_bytes},
                          {"reserved_bytes", reserved},
                          {"fragmentation_headroom_bytes", reserved - p.peak_bytes},
                          {"persistent_bytes", p.persistent_bytes},
                          {"activation_bytes", p.activation_bytes},
                          {"plan_arena_bytes", arena},
                          {"lower_bound_bytes", p.lower_bound_bytes},
                          {"dry_run_ms", p.dry_run_ms},
                          {"assumptions", p.trace.assumptions}};
    nlohmann::json roles = nlohmann::json::object();
    for (int r = 0; r < memory::kNumRoles; ++r)
      roles[memory::role_name(static_cast<memory::Role>(r))] = peak_roles[static_cast<size_t>(r)];
    doc["peak_by_role"] = roles;
    if (fit_limit > 0) {
      doc["fit_bytes"] = fit_limit;
      doc["fit_batch_size"] = p.batch_size;
      // Capped: every batch up to the search's end fits, so there is no first batch that does not.
      doc["fit_over_batch_size"] = fit.capped ? nlohmann::json() : nlohmann::json(fit.over_batch);
      doc["fit_over_peak_bytes"] = fit.capped ? nlohmann::json() : nlohmann::json(fit.over_peak_bytes);
      doc["fit_over_reserved_bytes"] = fit.capped ? nlohmann::json() : nlohmann::json(fit.over_reserved_bytes);
      doc["fit_binds"] = fit.capped ? nlohmann::json() : nlohmann::json(fit.binds());
      doc["fit_search_max_batch_size"] = kMaxFitBatch;
      doc["fit_dry_runs"] = fit.dry_runs;
      doc["fit_ms"] = fit_ms;
    }
    if (f.measure) {
      doc["measured_peak_bytes"] = measured.peak_bytes;
      doc["measured_peak_reserved_bytes"] = measured.peak_reserved_bytes;
      doc["measured_step_skipped"] = measured.skipped;
    }
    std::cout << doc.dump() << "\n";
    return 0;
  }

  std::ostream& out = std::cout;
  out << "mixtrain memory: " << q.spec.model << " (" << f.size << "), batch " << p.batch_size << ", " << f.precision
      << (q.spec.checkpoint_activations ? ", checkpointed activations" : "") << ", one training step on "
      << q.target.str() << ", by dry run (" << std::fixed << std::setprecision(1) << p.dry_run_ms << " ms)\n"
      << std::defaultfloat;
  if (world > 1)
    out << "  rank 0 of " << world << ": " << p.batch_size << " of the global batch's " << q.global_batch_size
        << " samples" << (q.zero_stage == 1 ? "; ZeRO-1: AdamW's state for its shard of the parameters only" : "")
        << "\n";
  if (fit_limit > 0 && fit.capped) {
    out << "  --fit " << f.fit << ": batch " << p.batch_size << " fits (" << memory::format_bytes(reserved) << " reserved, "
        << memory::format_bytes(p.peak_bytes) << " allocated), and the search goes no further (it stops at " << kMaxFitBatch
        << " samples; larger batches were not tried) (" << fit.dry_runs << " dry runs, " << static_cast<int64_t>(fit_ms)
        << " ms)\n";
  } else if (fit_limit > 0) {
    // The limit meets the reserved bytes (the caching allocator's segments), so that is what fits.
    out << "  --fit " << f.fit << ": batch " << p.batch_size << " is the largest whose reserved bytes fit ("
        << memory::format_bytes(reserved) << " reserved, " << memory::format_bytes(p.peak_bytes) << " allocated)\n";
    if (fit.over_batch > 0)
      out << "  batch " << fit.over_batch << " would reserve " << memory::format_bytes(fit.over_reserved_bytes) << " and allocate "
          << memory::format_bytes(fit.over_peak_bytes) << ": "
          << (fit.binds() == "reserved" ? "reserved binds (the allocated bytes alone would fit)" : "allocated binds")
          << " (" << fit.dry_runs << " dry runs, " << static_cast<int64_t>(fit_ms) << " ms)\n";
  }
  print_row(out, "peak allocated", p.peak_bytes);
  print_row(out, "reserved (estimated)", reserved, "allocator replay");
  print_row(out, "  fragmentation headroom", reserved - p.peak_bytes);
  if (f.measure) {
    print_row(out, "measured peak allocated", measured.peak_bytes);
    print_row(out, "measured peak reserved", measured.peak_reserved_bytes);
  }
  out << "  at the peak:\n";
  for (int r = 0; r < memory::kNumRoles; ++r) {
    const auto role = static_cast<memory::Role>(r);
    const int64_t bytes = peak_roles[static_cast<size_t>(r)];
    // The fp8 rows only where a run has fp8 state: every other run's output stays as it was.
    if (bytes == 0 && (role == memory::Role::Fp8Copy || role == memory::Role::Fp8State)) continue;
    print_row(out, std::string("  ") + kRoleLabels[r], bytes);
  }
  print_row(out, "persistent (across steps)", p.persistent_bytes);
  print_row(out, "activations (most live)", p.activation_bytes);
  print_row(out, "in-step lower bound", p.lower_bound_bytes);
  print_row(out, "planned arena", arena, "greedy by size, best fit");
  for (const std::string& a : p.trace.assumptions) out << "  assumed: " << a << "\n";
  out << "  reserved: the step's requests replayed through the " << q.target.str()
      << " caching allocator (its rounding, pools and splits)\n";
  if (!f.timeline.empty()) out << "wrote " << f.timeline << "\n";
  return 0;
}

}  // namespace mixtrain::cli
