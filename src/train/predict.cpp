// A training step's memory from the Trainer's own step (predict.h).
#include "mixtrain/train/predict.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "mixtrain/base/checked_int.h"
#include "mixtrain/base/error.h"
#include "mixtrain/distributed/process_group.h"
#include "mixtrain/distributed/rank_shares.h"
#include "mixtrain/memory/device_memory.h"
#include "mixtrain/memory/dry_run.h"
#include "mixtrain/nn/skip_init.h"
#include "mixtrain/train/trainer.h"

namespace mixtrain::train {

namespace {

// The smallest batch searched: the tiny MLP preset's synthetic data needs two samples.
constexpr int64_t kMinFitBatch = 2;

// The run's options for a planned step on `device` (a planned Trainer reads no checkpoint
// settings and no shares, so the rest is taken as it is).
TrainOptions planned_options(const StepQuery& query, Device device) {
  TrainOptions o = query.options;
  o.device = device;
  return o;
}

std::unique_ptr<TrainTask> planned_task(const TaskFactory& make_task, const StepQuery& query, Device device) {
  MT_CHECK(make_task != nullptr, "predict_step: no TaskFactory given");
  const int64_t batch = query.global_batch_size > 0 ? query.global_batch_size : query.batch_size;
  // A meta model's values are never read: skipping the initialisers' CPU draws is most of the
  // full transformer's build time, which each --fit probe pays.
  std::optional<nn::init::SkipInitGuard> skip_init;
  if (device.is_meta() && !query.initialise_weights) skip_init.emplace();
  std::unique_ptr<TrainTask> task = make_task(batch, device);
  MT_CHECK(task != nullptr, "predict_step: the TaskFactory returned no task (batch ", batch, ", ", device.str(), ")");
  return task;
}

PlannedRank planned_rank(const StepQuery& query) {
  MT_CHECK(query.global_batch_size == 0 || (query.batch_size >= 1 && query.batch_size <= query.global_batch_size),
           "predict_step: a rank's batch of ", query.batch_size, " samples must lie in [1, ", query.global_batch_size,
           "], the global batch");
  MT_CHECK(query.options.zero_stage == 0 || (query.options.zero_stage == 1 && query.world_size >= 1),
           "predict_step: ZeRO stage ", query.options.zero_stage, " over ", query.world_size,
           " ranks is not predicted (0, or 1 over one or more ranks)");
  return {query.world_size, query.global_batch_size > 0 ? query.batch_size : 0};
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
    now = live_after(now, e, "predict_step: activation bytes live");
    peak = std::max(peak, now);
  }
  return peak;
}

}  // namespace

StepPrediction predict_step(const TaskFactory& make_task, const StepQuery& query) {
  const PlannedRank rank = planned_rank(query);
  const std::unique_ptr<TrainTask> task = planned_task(make_task, query, Device::meta());
  Trainer trainer(*task, planned_options(query, Device::meta()), rank);
  const auto start = std::chrono::steady_clock::now();
  StepPrediction r;
  r.trace = memory::dry_run_step(query.target, [&] { trainer.step(); });
  r.dry_run_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  r.batch_size = query.global_batch_size > 0 ? query.batch_size : task->batch_size();
  r.peak_bytes = r.trace.peak_bytes();
  r.reserved_bytes = memory::replay_reserved_bytes(r.trace);
  for (const memory::MemoryEvent& e : r.trace.events)
    r.persistent_bytes = live_after(r.persistent_bytes, e, "predict_step: persistent bytes");
  r.activation_bytes = peak_live_of_role(r.trace, memory::Role::Activation);
  r.lower_bound_bytes = r.trace.in_step_peak_bytes();
  return r;
}

StepMeasurement measure_step(const TaskFactory& make_task, const StepQuery& query, Device device) {
  const PlannedRank rank = planned_rank(query);
  memory::empty_cache(device);  // reserved bytes from here on are this measurement's own
  const memory::Stats before = memory::stats(device);
  StepMeasurement m;
  {
    const std::unique_ptr<TrainTask> task = planned_task(make_task, query, device);
    Trainer trainer(*task, planned_options(query, device), rank);
    trainer.step();
    memory::reset_peak_stats(device);
    m.skipped = trainer.step().skipped;
    const memory::Stats after = memory::stats(device);
    m.peak_bytes = after.peak_allocated_bytes - before.allocated_bytes;
    m.peak_reserved_bytes = after.peak_reserved_bytes - before.reserved_bytes;
  }
  memory::empty_cache(device);
  return m;
}

std::string FitResult::binds() const {
  if (over_batch == 0) return "";
  return over_peak_bytes > limit ? "allocated" : "reserved";
}

FitResult fit_batch(const TaskFactory& make_task, StepQuery query, int64_t limit, int64_t max_batch, FitBy by) {
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
        query.batch_size = batch;
        StepPrediction p = predict_step(make_task, query);
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

std::vector<double> rank_weights_by_memory(const TaskFactory& make_task, StepQuery query, int64_t global_batch,
                                           int64_t held_bytes, std::string* report) {
  const int world = distributed::read_launch_env().world_size;
  const distributed::RankShares shares = distributed::launch_rank_shares(world);
  if (!shares.by_memory || world <= 1) return {};  // one process: its batch is the global batch
  query.global_batch_size = global_batch;
  query.world_size = world;
  return distributed::fit_rank_shares(query.target, global_batch, [&](int64_t budget) {
    // By the allocated peak; the rank budget is free memory plus the cache's free bytes, so reserved
    // would be the stricter and truer test (a follow-up).
    const FitResult fit = fit_batch(make_task, query, checked_add(budget, held_bytes, "rank budget"), global_batch,
                                    FitBy::Allocated);
    return fit.fits ? fit.best.batch_size : int64_t{0};
  }, report);
}

}  // namespace mixtrain::train
