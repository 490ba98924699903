// The dry-run prediction, measurement, arena layout and batch search behind
// `mixtrain memory` (memory_predict.h).
#include "memory_predict.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "common/cli.h"
#include "mixtrain/base/checked_int.h"
#include "mixtrain/distributed/zero.h"
#include "mixtrain/memory/batch_fit.h"
#include "mixtrain/memory/device_memory.h"
#include "mixtrain/memory/plan.h"

namespace mixtrain::cli {

namespace {

// One optimizer and scaler per task, as train::train makes them. ZeRO-1: the optimizer over
// rank 0's shard (`shard`: views of the parameters' elements it updates, `pieces` where they lie).
struct Trainer {
  std::unique_ptr<train::TrainTask> task;
  std::unique_ptr<optim::AdamW> opt;
  std::unique_ptr<amp::GradScaler> scaler;
  std::unique_ptr<amp::Fp8Scaling> fp8;  // --precision fp8
  std::vector<distributed::ZeroPiece> pieces;
  std::vector<Tensor> shard;
};

Trainer make_trainer(TaskSpec spec, train::Precision p, Device device, bool initialise_weights = true,
                     int zero_world = 0) {
  spec.device = device;
  spec.synthetic = true;
  Trainer t;
  {
    // A meta model's values are never read: skipping the initialisers' CPU draws is most of the
    // full transformer's build time, which each --fit probe pays.
    std::optional<nn::init::SkipInitGuard> skip_init;
    if (!initialise_weights) skip_init.emplace();
    t.task = make_task(spec);
  }
  std::vector<Tensor> params = t.task->model().parameters();
  if (zero_world > 0) {
    t.pieces = distributed::zero_pieces(params, nn::DistributedDataParallelOptions(), 0, zero_world);
    NoGradGuard no_grad;
    for (const auto& piece : t.pieces)
      t.shard.push_back(params[piece.param].detach().view({-1}).narrow(0, piece.offset, piece.numel));
    params = t.shard;
  }
  t.opt = std::make_unique<optim::AdamW>(params, optim::AdamWOptions().lr(default_lr(spec.model)));
  t.scaler = std::make_unique<amp::GradScaler>(
      amp::GradScalerOptions().init_scale(65536.0).enabled(p == train::Precision::Fp16));
  t.fp8 = train::make_fp8_scaling(t.task->model(), p, amp::Fp8Recipe());
  return t;
}

// One step as train::train takes it (train_loop.cpp): autocast forward, scaled backward,
// unscale, clip at 1, scaler step and update. `autocast_type` is the device type whose autocast
// state applies (the target's, also for a meta step). The outcome is read only for a real step
// (a meta one cannot give the found_inf flag).
amp::StepOutcome train_step(Trainer& t, DeviceType autocast_type, train::Precision p) {
  t.opt->zero_grad();
  if (!t.shard.empty())
    for (Tensor& param : t.task->model().parameters()) param.set_grad(Tensor());
  Tensor loss;
  {
    const train::ForwardScope scope(autocast_type, p);
    loss = t.task->next_loss();
  }
  t.scaler->scale(loss).backward();
  // ZeRO-1: the shard's gradients are its elements of the (reduced) gradients, read in place.
  const std::vector<Tensor> params = t.task->model().parameters();
  for (size_t i = 0; i < t.shard.size(); ++i)
    t.shard[i].set_grad(params[t.pieces[i].param].grad().view({-1}).narrow(0, t.pieces[i].offset, t.pieces[i].numel));
  t.scaler->unscale_(*t.opt);
  nn::utils::clip_grad_norm_(t.shard.empty() ? params : t.shard, 1.0);
  amp::StepOutcome outcome = t.scaler->step(*t.opt);
  t.scaler->update();
  if (t.fp8) t.fp8->update();
  return outcome;
}

// Live bytes after event e, checked: a step past 2^63 - 1 bytes is an Error, never a negative figure.
int64_t live_after(int64_t live, const memory::MemoryEvent& e, const char* what) {
  const int64_t bytes = checked_int64(e.bytes, what);
  return e.kind == memory::MemoryEvent::Kind::Alloc ? checked_add(live, bytes, what) : checked_sub(live, bytes, what);
}

int64_t peak_live_of_role(const memory::MemoryTrace& trace, memory::Role role) {
  int64_t now = 0, peak = 0;
  for (const memory::MemoryEvent& e : trace.events) {
    if (e.role != role) continue;
    now = live_after(now, e, "mixtrain memory: activation bytes live");
    peak = std::max(peak, now);
  }
  return peak;
}

}  // namespace

StepPrediction predict_step(const StepQuery& query) {
  TaskSpec spec = query.spec;
  const int64_t rows = spec.batch_size;
  const bool shard = query.global_batch_size > 0 && rows < query.global_batch_size;
  if (query.global_batch_size > 0) {
    MT_CHECK(rows >= 1 && rows <= query.global_batch_size, "predict_step: a rank's batch of ", rows,
             " samples must lie in [1, ", query.global_batch_size, "], the global batch");
    spec.batch_size = query.global_batch_size;
  }
  MT_CHECK(query.zero_stage == 0 || (query.zero_stage == 1 && query.world_size >= 1), "predict_step: ZeRO stage ",
           query.zero_stage, " over ", query.world_size, " ranks is not predicted (0, or 1 over one or more ranks)");
  Trainer t = make_trainer(spec, query.precision, Device::meta(), query.initialise_weights,
                           query.zero_stage == 1 ? query.world_size : 0);
  // Rank 0 of two whose shares are `rows` and the rest: its step computes on its rows only.
  if (shard) t.task->set_data_shard(0, {static_cast<double>(rows), static_cast<double>(query.global_batch_size - rows)});
  const auto start = std::chrono::steady_clock::now();
  StepPrediction r;
  r.trace = memory::dry_run_step(query.target, [&] { train_step(t, query.target.type, query.precision); });
  r.dry_run_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  r.batch_size = query.global_batch_size > 0 ? rows : t.task->batch_size();
  r.peak_bytes = r.trace.peak_bytes();
  r.reserved_bytes = memory::replay_reserved_bytes(r.trace);
  for (const memory::MemoryEvent& e : r.trace.events)
    r.persistent_bytes = live_after(r.persistent_bytes, e, "mixtrain memory: persistent bytes");
  r.activation_bytes = peak_live_of_role(r.trace, memory::Role::Activation);
  r.lower_bound_bytes = r.trace.in_step_peak_bytes();
  return r;
}

StepMeasurement measure_step(const StepQuery& query) {
  const Device device = query.spec.device;
  memory::empty_cache(device);  // reserved bytes from here on are this measurement's own
  const memory::Stats before = memory::stats(device);
  StepMeasurement m;
  {
    Trainer t = make_trainer(query.spec, query.precision, device);
    train_step(t, device.type, query.precision);
    memory::reset_peak_stats(device);
    m.skipped = !train_step(t, device.type, query.precision).taken();
    const memory::Stats after = memory::stats(device);
    m.peak_bytes = after.peak_allocated_bytes - before.allocated_bytes;
    m.peak_reserved_bytes = after.peak_reserved_bytes - before.reserved_bytes;
  }
  memory::empty_cache(device);
  return m;
}

ArenaLayout arena_layout(const std::vector<memory::BufferLifetime>& buffers) {
  const memory::ArenaPlan plan = memory::plan_arena(buffers);
  ArenaLayout layout;
  layout.offsets.assign(plan.offsets.begin(), plan.offsets.end());
  layout.bytes = static_cast<int64_t>(plan.arena_bytes);
  return layout;
}

int64_t arena_bytes(const std::vector<memory::BufferLifetime>& buffers) {
  return static_cast<int64_t>(memory::plan_arena(buffers).arena_bytes);
}

int64_t parse_byte_size(const std::string& text, const std::string& flag) {
  try {
    return memory::parse_bytes(text, flag);
  } catch (const Error& e) {
    throw examples::cli::UsageError(e.what());
  }
}

// The smallest batch searched: the tiny MLP preset's synthetic data needs two samples.
constexpr int64_t kMinFitBatch = 2;

std::string FitResult::binds() const {
  if (over_batch == 0) return "";
  return over_peak_bytes > limit ? "allocated" : "reserved";
}

FitResult fit_batch(StepQuery query, int64_t limit, int64_t max_batch, FitBy by) {
  // The figure the search keeps within the limit (reserved is never below allocated, but the
  // larger of the two is taken so the answer holds whatever the replay says).
  const auto bytes = [by](const StepPrediction& p) {
    return by == FitBy::Allocated ? p.peak_bytes : std::max(p.peak_bytes, p.reserved_bytes);
  };
  // Each probe's prediction is kept only if the answer may need it: the largest batch that fits
  // and the smallest that does not.
  std::optional<StepPrediction> best, over;
  int64_t best_batch = 0, over_batch = 0;
  const memory::BatchFit fit = memory::fit_batch(
      [&](int64_t batch) {
        query.spec.batch_size = batch;
        StepPrediction p = predict_step(query);
        // Guessed from the allocated peak, which grows smoothly with the batch.
        const memory::BatchProbe probe{bytes(p), p.peak_bytes};
        if (probe.bytes <= limit && batch > best_batch) {
          best_batch = batch;
          best = std::move(p);
        } else if (probe.bytes > limit && (over_batch == 0 || batch < over_batch)) {
          over_batch = batch;
          over = std::move(p);
        }
        return probe;
      },
      limit, kMinFitBatch, max_batch);
  FitResult r;
  r.by = by;
  r.limit = limit;
  r.fits = fit.fits;
  r.over_batch = fit.over_batch;
  if (over) {
    r.over_peak_bytes = over->peak_bytes;
    r.over_reserved_bytes = over->reserved_bytes;
  }
  r.best = fit.fits ? std::move(*best) : *over;  // the smallest batch when even that does not fit
  r.capped = fit.capped;
  r.dry_runs = fit.dry_runs;
  return r;
}

}  // namespace mixtrain::cli
