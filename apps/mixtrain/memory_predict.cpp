// `mixtrain memory`'s questions for the example tasks, put to the library (memory_predict.h).
#include "memory_predict.h"

#include "common/cli.h"
#include "mixtrain/memory/plan.h"

namespace mixtrain::cli {

train::TaskFactory task_factory(TaskSpec spec) {
  spec.synthetic = true;
  return [spec](int64_t batch_size, Device device) {
    TaskSpec s = spec;
    s.batch_size = batch_size;
    s.device = device;
    return make_task(s);
  };
}

train::StepQuery library_query(const StepQuery& query) {
  train::StepQuery q;
  q.options.precision = query.precision;
  q.options.lr = default_lr(query.spec.model);
  q.options.zero_stage = query.zero_stage;
  q.target = query.target;
  q.batch_size = query.spec.batch_size;
  q.global_batch_size = query.global_batch_size;
  q.world_size = query.world_size;
  q.initialise_weights = query.initialise_weights;
  return q;
}

StepPrediction predict_step(const StepQuery& query) {
  return train::predict_step(task_factory(query.spec), library_query(query));
}

StepMeasurement measure_step(const StepQuery& query) {
  return train::measure_step(task_factory(query.spec), library_query(query), query.spec.device);
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

FitResult fit_batch(StepQuery query, int64_t limit, int64_t max_batch, FitBy by) {
  return train::fit_batch(task_factory(query.spec), library_query(query), limit, max_batch, by);
}

}  // namespace mixtrain::cli
