#pragma once
// What one training step of an example model needs in memory, found by memory::dry_run (no step
// computed, no device memory touched), and the same step run for real to measure it. Used by
// `mixtrain memory`; see docs/MEMORY.md ("mixtrain memory").
#include <cstdint>
#include <string>
#include <vector>

#include <mixtrain/memory/batch_fit.h>
#include <mixtrain/memory/device_memory.h>
#include <mixtrain/memory/dry_run.h>
#include <mixtrain/mixtrain.h>

#include "tasks.h"

namespace mixtrain::cli {

// A step to predict: spec.model / size / batch_size / checkpoint_activations choose the task
// (spec.device is ignored: the task is built on meta); `target` is the device it is planned for.
struct StepQuery {
  TaskSpec spec;
  train::Precision precision = train::Precision::Fp32;
  Device target = Device::cpu();
  // Build the model as a real run would (weights initialised on the CPU, then moved to meta)
  // instead of under nn::init::SkipInitGuard. The prediction is the same either way (a dry run
  // never reads a value); only the tests that show so set it.
  bool initialise_weights = false;
  // > 0: one rank's step under data parallelism. The task draws batches of this many samples
  // (every rank holds the global batch's data) and the step computes on spec.batch_size of them
  // (at most this many), as train() shards it.
  int64_t global_batch_size = 0;
  // > 1 with zero_stage 1: rank 0 of this many under ZeroRedundancyOptimizer (ZeRO-1), its AdamW
  // state (and master weights) only for its shard of DDP's buckets, as the real run cuts them.
  int zero_stage = 0;
  int world_size = 1;
};

struct StepPrediction {
  memory::MemoryTrace trace;  // the second step's events (the first creates the optimizer state)
  int64_t batch_size = 0;
  int64_t peak_bytes = 0;          // most bytes allocated at once, everything alive included
  int64_t reserved_bytes = 0;      // memory::replay_reserved_bytes(trace): what a device limit meets
  // Alive at the step's end, what the next step starts with: weights, gradients, optimizer state,
  // data. (MemoryTrace::persistent_bytes() also counts the gradients the step replaced.)
  int64_t persistent_bytes = 0;
  int64_t activation_bytes = 0;    // most activation bytes live at once
  int64_t lower_bound_bytes = 0;   // most in-step bytes live at once: no arena can be smaller
  double dry_run_ms = 0;           // wall time of the dry run of both steps (task construction excluded)
};

// Builds the task on meta and dry-runs two steps as the trainers take them (autocast, GradScaler
// for fp16, clipping, AdamW); the trace is the second's (the first allocates the optimizer state,
// which the second finds alive before it).
StepPrediction predict_step(const StepQuery& query);

struct StepMeasurement {
  int64_t peak_bytes = 0;           // peak allocated during the step, less what was held before the task existed
  int64_t peak_reserved_bytes = 0;  // peak reserved during the step, less what was reserved before
  bool skipped = false;             // the GradScaler skipped the measured step's update
};
// The same task on query.spec.device (the CPU or a present GPU): one warm-up step, then the
// measured one, after memory::reset_peak_stats.
StepMeasurement measure_step(const StepQuery& query);

// An arena layout of in-step buffers: every buffer an offset, no two buffers that are live at the
// same time overlapping.
struct ArenaLayout {
  std::vector<int64_t> offsets;  // parallel to the lifetimes given
  int64_t bytes = 0;
};
// The library's planner (memory::plan_arena, include/mixtrain/memory/plan.h) in the CLI's terms.
ArenaLayout arena_layout(const std::vector<memory::BufferLifetime>& buffers);
int64_t arena_bytes(const std::vector<memory::BufferLifetime>& buffers);  // the arena it needs

// memory::parse_bytes for a flag: anything but a size throws a UsageError naming `flag`.
int64_t parse_byte_size(const std::string& text, const std::string& flag);

// What a batch must keep within the limit. Reserved: the caching allocator's predicted peak
// reserved bytes (never below the allocated peak), which is what a device's memory limit meets:
// `mixtrain memory --fit`. Allocated: the peak allocated bytes only.
enum class FitBy { Reserved, Allocated };

struct FitResult {
  bool fits = false;               // the smallest batch searched (2) fits
  StepPrediction best;             // at the largest batch that fits (or at batch 2 when none does)
  int64_t over_batch = 0;          // the smallest batch tried that does not fit (0: none found)
  int64_t over_peak_bytes = 0;     // its peak allocated
  int64_t over_reserved_bytes = 0; // and its predicted reserved
  bool capped = false;             // fits: best is max_batch, larger batches were not tried
  int dry_runs = 0;
  FitBy by = FitBy::Reserved;
  int64_t limit = 0;
  // Which figure stopped over_batch: "allocated" when its peak allocated alone exceeds the limit,
  // "reserved" when only the allocator's reserve does ("" when no batch was over).
  std::string binds() const;
};
// The largest batch whose predicted bytes (by `by`) are at most `limit`, from 2 up to max_batch:
// memory::fit_batch's search over predict_step, its guesses from the allocated peak (smooth, where
// the reserved bytes rise in segment-sized steps). Every batch it calls fitting was dry-run and is
// within the limit; `capped` says it stopped at max_batch.
using memory::kMaxFitBatch;
FitResult fit_batch(StepQuery query, int64_t limit, int64_t max_batch = kMaxFitBatch, FitBy by = FitBy::Reserved);

}  // namespace mixtrain::cli
