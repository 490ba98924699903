#pragma once
// `mixtrain memory`'s questions in the example tasks' terms (TaskSpec), answered by the library's
// planning of the Trainer's step (train/predict.h); see docs/MEMORY.md ("mixtrain memory").
#include <cstdint>
#include <string>
#include <vector>

#include <mixtrain/memory/batch_fit.h>
#include <mixtrain/memory/device_memory.h>
#include <mixtrain/memory/dry_run.h>
#include <mixtrain/mixtrain.h>
#include <mixtrain/train/predict.h>

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

using train::StepPrediction;
using train::StepMeasurement;
using train::FitBy;
using train::FitResult;
using memory::kMaxFitBatch;

// The library's planning (train/predict.h) for the example tasks: spec's model at the query's
// batch, synthetic data, planned for `target`.
train::TaskFactory task_factory(TaskSpec spec);
train::StepQuery library_query(const StepQuery& query);

// train::predict_step of the query's task.
StepPrediction predict_step(const StepQuery& query);
// train::measure_step on query.spec.device (the CPU or a present GPU).
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

// train::fit_batch of the query's task: the largest batch from 2 up to max_batch whose predicted
// bytes (by `by`) are at most `limit` (`mixtrain memory --fit`).
FitResult fit_batch(StepQuery query, int64_t limit, int64_t max_batch = kMaxFitBatch, FitBy by = FitBy::Reserved);

}  // namespace mixtrain::cli
