#pragma once
// A training step's memory, known before it runs: the Trainer's step (trainer.h) dry-run on meta
// for a target device (memory::dry_run_step: no step computed, no device memory touched), the same
// step measured for real, the largest batch whose step fits a budget, and every rank's share of a
// global batch by its memory (--rank-batches auto). `mixtrain memory` prints them; a trainer of
// one's own gets them by giving its TrainTask as a TaskFactory (docs/MEMORY.md, "Your own trainer").
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mixtrain/memory/batch_fit.h"
#include "mixtrain/memory/trace.h"
#include "mixtrain/train/train_loop.h"

namespace mixtrain::train {

struct StepQuery {
  // The run's settings as train() takes them (precision, clipping, init_scale, zero_stage,
  // memory_plan, FP8 recipe); the device, checkpoints and shares are ignored.
  TrainOptions options;
  Device target = Device::cpu();  // the device planned for
  int64_t batch_size = 0;         // this rank's samples per step (0: the task's default)
  // > 0: one rank's step under data parallelism. The task draws batches of this many samples
  // (every rank holds the global batch's data) and the step computes on batch_size of them.
  int64_t global_batch_size = 0;
  // With options.zero_stage 1: rank 0 of this many, its optimizer state (and master weights) for
  // its shard of DDP's buckets only, as the real run cuts them.
  int world_size = 1;
  // Build the model as a real run would (weights initialised, then moved to meta) instead of
  // under nn::init::SkipInitGuard. The prediction is the same either way (a dry run never reads a
  // value); only the tests that show so set it.
  bool initialise_weights = false;
};

struct StepPrediction {
  memory::MemoryTrace trace;   // the second step's events (the first creates the optimizer state)
  int64_t batch_size = 0;
  int64_t peak_bytes = 0;      // most bytes allocated at once, everything alive included
  int64_t reserved_bytes = 0;  // memory::replay_reserved_bytes(trace): what a device limit meets
  // Alive at the step's end, what the next step starts with: weights, gradients, optimizer state,
  // data. (MemoryTrace::persistent_bytes() also counts the gradients the step replaced.)
  int64_t persistent_bytes = 0;
  int64_t activation_bytes = 0;   // most activation bytes live at once
  int64_t lower_bound_bytes = 0;  // most in-step bytes live at once: no arena can be smaller
  double dry_run_ms = 0;          // wall time of the dry run of both steps (task construction excluded)
};
// The task built on meta and two Trainer steps dry-run for query.target; the trace is the
// second's (the first allocates the optimizer state, which the second finds alive before it).
StepPrediction predict_step(const TaskFactory& make_task, const StepQuery& query);

struct StepMeasurement {
  int64_t peak_bytes = 0;           // peak allocated during the step, less what was held before the task existed
  int64_t peak_reserved_bytes = 0;  // peak reserved during the step, less what was reserved before
  bool skipped = false;             // the GradScaler skipped the measured step's update
};
// The same task on `device` (the CPU or a present GPU): one warm-up step, then the measured one,
// after memory::reset_peak_stats.
StepMeasurement measure_step(const TaskFactory& make_task, const StepQuery& query, Device device);

// What a batch must keep within the limit. Reserved: the caching allocator's predicted peak
// reserved bytes (never below the allocated peak), which is what a device's memory limit meets.
// Allocated: the peak allocated bytes only.
enum class FitBy { Reserved, Allocated };

struct FitResult {
  bool fits = false;                // the smallest batch searched (2) fits
  StepPrediction best;              // at the largest batch that fits (or at batch 2 when none does)
  int64_t over_batch = 0;           // the smallest batch tried that does not fit (0: none found)
  int64_t over_peak_bytes = 0;      // its peak allocated
  int64_t over_reserved_bytes = 0;  // and its predicted reserved
  bool capped = false;              // fits: best is max_batch, larger batches were not tried
  int dry_runs = 0;
  FitBy by = FitBy::Reserved;
  int64_t limit = 0;
  // Which figure stopped over_batch: "allocated" when its peak allocated alone exceeds the limit,
  // "reserved" when only the allocator's reserve does ("" when no batch was over).
  std::string binds() const;
};
// The largest batch (query.batch_size varied from 2 up to max_batch) whose predicted bytes (by
// `by`) are at most `limit`: memory::fit_batch's search over predict_step, its guesses from the
// allocated peak (smooth, where the reserved bytes rise in segment-sized steps). Every batch it
// calls fitting was dry-run and is within the limit; `capped` says it stopped at max_batch.
FitResult fit_batch(const TaskFactory& make_task, StepQuery query, int64_t limit,
                    int64_t max_batch = memory::kMaxFitBatch, FitBy by = FitBy::Reserved);

// MIXTRAIN_RANK_BATCHES=auto (mixtrain launch --rank-batches auto) under a launcher: each rank's
// largest share of global_batch whose step fits its memory (by the allocated peak; the budget of
// distributed::rank_memory_budget plus `held_bytes`: what this rank's task already holds on the
// device when that budget is its free memory, since the prediction counts it), gathered into the shares every rank trains with
// (distributed::fit_rank_shares). Empty when the launcher asked for none or runs one process.
std::vector<double> rank_weights_by_memory(const TaskFactory& make_task, StepQuery query, int64_t global_batch,
                                           int64_t held_bytes = 0, std::string* report = nullptr);

}  // namespace mixtrain::train
