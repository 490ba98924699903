#include "common/run_task.h"

#include <iomanip>
#include <ostream>

namespace mixtrain::examples {

RunOutcome run_task(train::TrainTask& task, const RunSettings& s) {
  if (s.log)
    *s.log << task.describe() << "; batch " << s.batch_size << ", " << s.steps << " steps, "
           << train::precision_name(s.precision) << " on " << s.device << std::endl;
  train::TrainOptions options;
  options.precision = s.precision;
  options.device = s.device;
  options.steps = s.steps;
  options.lr = s.lr;
  options.memory_plan = s.memory_plan;
  const train::TrainResult tr = train::train_with_log(task, options, s.log, s.log_every);
  RunOutcome r;
  for (const auto& rec : tr.records) r.losses.push_back(rec.loss);
  r.seconds = tr.seconds;
  r.skipped_steps = tr.skipped_steps;
  r.plan_hits = tr.plan_hits;
  r.plan_misses = tr.plan_misses;
  r.evaluation = task.evaluate();
  if (s.log) {
    *s.log << r.evaluation << "; trained in " << std::fixed << std::setprecision(1) << r.seconds << " s, "
           << r.skipped_steps << " skipped steps" << std::defaultfloat;
    if (s.memory_plan)
      *s.log << "; memory plan: " << tr.memory_plans << " plans, " << tr.plan_hits << " arena hits, "
             << tr.plan_misses << " missed steps";
    *s.log << std::endl;
  }
  return r;
}

}  // namespace mixtrain::examples
