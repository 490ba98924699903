#pragma once
// What `mixtrain bench` shows beside its measured peaks: one steady training step of the
// benchmarked model, the Trainer's own step predicted by a dry run on meta tensors
// (train::predict_step) and its in-step buffers planned into one arena (memory::plan_arena).
// Nothing of the target device is touched. See docs/MEMORY.md.
#include <cstdint>

#include <mixtrain/train/train_loop.h>
#include "tasks.h"

namespace mixtrain::cli {

struct StepMemoryPrediction {
  int64_t peak_bytes = 0;         // everything live at the step's peak: parameters, state, batches too
  int64_t plan_arena_bytes = 0;   // the arena --memory-plan would serve the step's in-step buffers from
  int64_t lower_bound_bytes = 0;  // peak of those buffers live at once
};

// spec.device is the target; the task is rebuilt on the meta device with spec's seed and size.
// Of the two steps dry-run, the second is traced (the first makes AdamW's state). Throws what the
// dry run throws.
StepMemoryPrediction predict_step_memory(TaskSpec spec, train::Precision precision, double lr);

}  // namespace mixtrain::cli
