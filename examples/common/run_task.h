#pragma once
// What the example trainers' run_mlp / run_unet / run_transformer share around the library's
// training loop (mixtrain::train): a line about the task and the run, training with a progress
// line, the evaluation, and the summary every example's result holds.
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include <mixtrain/mixtrain.h>

namespace mixtrain::examples {

struct RunSettings {
  train::Precision precision = train::Precision::Fp16;
  Device device = Device::cpu();
  int64_t steps = 0, batch_size = 0;
  double lr = 1e-3;
  std::ostream* log = nullptr;
  int64_t log_every = 0;
  bool memory_plan = false;
};
struct RunOutcome {
  std::vector<double> losses;  // every step's training loss
  double seconds = 0;
  int64_t skipped_steps = 0;
  std::string evaluation;      // the task's evaluate() line
  int64_t plan_hits = 0, plan_misses = 0;  // with memory_plan (train::TrainResult's)
};
// Logs "<description>; batch B, N steps, <precision> on <device>", trains the task with
// train_with_log, evaluates it and logs "<evaluation>; trained in S s, K skipped steps".
RunOutcome run_task(train::TrainTask& task, const RunSettings& settings);

// What every example's result holds (MlpResult, UnetResult, TransformerResult add their own).
struct RunSummary {
  std::vector<double> losses;  // training loss of every step
  int64_t parameters = 0;
  int64_t skipped_steps = 0;   // optimizer steps the GradScaler skipped (inf/NaN gradients)
  double seconds = 0;          // training loop wall time (data loading excluded)
  std::string description;     // the task's describe()
};

// run_task with an example config's run settings, filling the summary part of its result.
template <class Config>
void run_into(train::TrainTask& task, const Config& c, RunSummary& out) {
  out.description = task.describe();
  out.parameters = train::parameter_count(task.model());
  const RunOutcome run = run_task(task, {c.precision, c.device, c.steps, c.batch_size, c.lr, c.log, c.log_every, c.memory_plan});
  out.losses = run.losses;
  out.seconds = run.seconds;
  out.skipped_steps = run.skipped_steps;
}

}  // namespace mixtrain::examples
