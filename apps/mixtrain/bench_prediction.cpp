#include "bench_prediction.h"

#include <mixtrain/memory/plan.h>
#include <mixtrain/train/predict.h>

namespace mixtrain::cli {

StepMemoryPrediction predict_step_memory(TaskSpec spec, train::Precision precision, double lr) {
  train::StepQuery query;
  query.target = spec.device;
  query.batch_size = spec.batch_size;
  query.options.precision = precision;
  query.options.lr = lr;
  // As --memory-plan steps: the gradients are in-step buffers then (dropped at the step's end),
  // and the peak is the same as with zero_grad first.
  query.options.memory_plan = true;
  const train::StepPrediction p = train::predict_step(
      [spec](int64_t batch_size, Device device) {
        TaskSpec s = spec;
        s.batch_size = batch_size;
        s.device = device;
        return make_task(s);
      },
      query);
  const memory::ArenaPlan plan = memory::plan_arena(p.trace.lifetimes());
  StepMemoryPrediction out;
  out.peak_bytes = p.peak_bytes;
  out.plan_arena_bytes = static_cast<int64_t>(plan.arena_bytes);
  out.lower_bound_bytes = static_cast<int64_t>(plan.lower_bound_bytes);
  return out;
}

}  // namespace mixtrain::cli
