#pragma once
// The one training step everything is built on. A Trainer owns what a step needs besides the
// task (the model's optimizer, whole or ZeRO-sharded, its schedule, the GradScaler, FP8 state, DDP
// under a launcher and the elastic agent under `mixtrain launch --elastic`) and has one step().
// train() is Trainer(task, options).run(); the memory prediction, the measured step, the batch
// fit and --rank-batches auto (train/predict.h) run the same step() on meta or on the device.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "mixtrain/amp/grad_scaler.h"
#include "mixtrain/memory/allocator.h"
#include "mixtrain/train/train_loop.h"

namespace mixtrain::train {

// What one step computed, read after it (the loss and the norm wait for the device; a step on
// meta reads nothing and leaves them 0).
struct StepValues {
  double loss = 0;       // the global batch's loss under data parallelism
  double grad_norm = 0;  // after unscaling; 0 without clipping
  bool skipped = false;  // the scaler skipped the update (inf/NaN gradients)
  bool params_finite = true;
  std::vector<int64_t> rank_rows;  // data parallel: every rank's rows of this step's batch
};

// One rank of a data-parallel job, planned on one process (no process group, no collective):
// rank 0 of world_size, whose step computes `rows` of each global batch (the task's batch size)
// and, with TrainOptions::zero_stage 1, holds only its ZeRO-1 shard of the optimizer state.
struct PlannedRank {
  int world_size = 1;
  int64_t rows = 0;  // 0: the whole batch
};

class Trainer {
 public:
  // A run of `task` (which must outlive the Trainer): the model on options.device, resumed from
  // options.resume_dir (or, restarted by its launcher, from options.save_dir). Under a launcher
  // (WORLD_SIZE > 1) it joins the process group, wraps the model in DDP (rank 0's parameters
  // everywhere, each rank its share of every batch), and with --elastic runs under the agent.
  Trainer(TrainTask& task, const TrainOptions& options);
  // The same parts for planning or measuring one step on one process, launcher or not:
  // options.device may be meta (a dry run), `rank` the data-parallel rank the step plays.
  Trainer(TrainTask& task, const TrainOptions& options, const PlannedRank& rank);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One step, from zero_grad to the scheduler: the forward pass under autocast (or FP8), the
  // scaled backward (gradients reduced under DDP), unscale, clip, the optimizer's step (skipped
  // on inf/NaN), the scaler's and FP8's updates, the schedule, and the parameters' finiteness
  // scan. With TrainOptions::memory_plan the gradients are dropped at its end (they are in-step
  // buffers then). Refuses a rate the optimizer cannot apply before anything is written.
  StepValues step();

  // Steps first_step() .. options.steps with checkpoints (every save_every and at the end) and,
  // elastic, recovery from lost or joining ranks; on_step gets every step's record.
  TrainResult run(const std::function<void(const StepRecord&)>& on_step = {});

  int64_t first_step() const { return result_.first_step; }
  nn::Module& model() { return model_; }
  optim::Optimizer& optimizer();
  amp::GradScaler& scaler();

 private:
  struct Parts;
  void join_launcher();
  void start_elastic(std::shared_ptr<distributed::ProcessGroup>& group);
  void make_ddp(const std::shared_ptr<distributed::ProcessGroup>& group, bool init_sync);
  void follow_shares();
  StepValues read_values(const Tensor& loss, const Tensor& global_loss, const Tensor& grad_norm,
                         const amp::StepOutcome& stepped, std::vector<int64_t> rank_rows);
  bool run_one(int64_t step, StepRecord& rec);
  void save_if_due(int64_t step);
  int64_t roll_back();
  void finish(TrainResult& result, const memory::Stats& plan_stats0);

  TrainTask& task_;
  TrainOptions options_;
  nn::Module& model_;
  std::unique_ptr<Parts> parts_;
  TrainResult result_;
  int64_t current_step_ = 0;
};

}  // namespace mixtrain::train
