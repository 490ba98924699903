#pragma once
// The optimizer side of the training loop (train_loop.cpp): AdamW over the whole model,
// or, with TrainOptions::zero_stage 1 under data parallelism, its ZeRO-1 shard
// (distributed::ZeroRedundancyOptimizer); the learning-rate schedule over it; and checkpoints of
// either (the whole model's optimizer state, in one file or, with TrainOptions::checkpoint_sharded,
// in a file per rank; either way a ZeRO run resumes at any world size).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mixtrain/amp/grad_scaler.h"
#include "mixtrain/distributed/zero.h"
#include "mixtrain/optim/adamw.h"
#include "mixtrain/optim/schedulers.h"
#include "mixtrain/train/train_loop.h"

namespace mixtrain::train {

class TrainerState {
 public:
  TrainerState(nn::Module& model, amp::GradScaler& scaler, const TrainOptions& options, const LrSchedule& schedule);
  ~TrainerState();

  // ZeRO-1 over `ddp` from now on: the optimizer (and its schedule) over this rank's shard.
  void shard(nn::DistributedDataParallel& ddp);
  // After the DDP moved to another group (elastic): the shard laid out anew, with empty state.
  void reshard();
  bool sharded() const { return zero_ != nullptr; }
  // Planning rank 0 of `world` on one process (train::predict_step): the optimizer over that
  // rank's ZeRO-1 shard of DDP's buckets, as a real run cuts them, with no group and no collective.
  void plan_shard(int world);
  // After backward: a planned shard's gradients are its elements of the whole gradients, read in
  // place (what the reduce-scatter leaves a real rank). Does nothing otherwise.
  void take_shard_gradients();
  // FP8 training: its scaling state goes into checkpoints with the rest (null: none).
  void set_fp8(amp::Fp8Scaling* fp8) { fp8_ = fp8; }

  optim::Optimizer& optimizer();
  optim::LRScheduler* scheduler() { return scheduler_.get(); }
  distributed::ZeroRedundancyOptimizer* zero() { return zero_.get(); }

  void zero_grad();
  // After the scaler's unscale_: the total gradient norm (across ranks when sharded), clipped.
  Tensor clip_grad_norm_(double max_norm);
  // The scaler's step of the optimizer (and, sharded, the parameters' all-gather).
  amp::StepOutcome step();

  // Checkpoints: the model, optimizer, scaler, schedule and data position. Sharded: collective
  // (save gathers the state into rank 0, which writes, or with checkpoint_sharded every rank
  // writes its shard; every rank loads its shard). Returns the checkpoint's step; the task's data
  // stream is where it was then (`fresh`: the task has drawn nothing yet, so skipping forward is
  // enough).
  int64_t load(const std::string& dir, TrainTask& task, bool fresh);
  void save(const std::string& dir, int64_t step, TrainTask& task, bool writer);

 private:
  void make_scheduler();
  nn::Module& model_;
  amp::GradScaler& scaler_;
  double lr_, weight_decay_;
  int64_t steps_;
  bool checkpoint_sharded_;
  LrSchedule schedule_;
  std::unique_ptr<optim::AdamW> full_;
  std::unique_ptr<distributed::ZeroRedundancyOptimizer> zero_;
  std::unique_ptr<optim::LRScheduler> scheduler_;
  std::vector<distributed::ZeroPiece> planned_pieces_;  // plan_shard: where the shard's elements lie
  std::vector<Tensor> planned_shard_;                   // and views of them
  amp::Fp8Scaling* fp8_ = nullptr;
};

}  // namespace mixtrain::train
