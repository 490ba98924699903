// The trainers' optimizer, schedule and checkpoints, whole or sharded (trainer_state.h).
#include "train/trainer_state.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "mixtrain/base/error.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/distributed/ddp.h"
#include "mixtrain/io/checkpoint.h"
#include "mixtrain/nn/utils.h"

namespace mixtrain::train {

TrainerState::TrainerState(nn::Module& model, amp::GradScaler& scaler, const TrainOptions& options,
                           const LrSchedule& schedule)
    : model_(model),
      scaler_(scaler),
      lr_(options.lr),
      weight_decay_(options.weight_decay),
      steps_(options.steps),
      checkpoint_sharded_(options.checkpoint_sharded),
      schedule_(options.constant_lr ? LrSchedule{} : schedule) {
  MT_CHECK(options.zero_stage == 0 || options.zero_stage == 1, "ZeRO stage ", options.zero_stage,
           " is not implemented (0: none, 1: optimizer state and master weights sharded)");
  MT_CHECK(!options.checkpoint_sharded || options.zero_stage == 1, "sharded checkpoints (--checkpoint-sharded) ",
           "hold ZeRO's optimizer shards: give --zero 1 too");
  full_ = std::make_unique<optim::AdamW>(model.parameters(), optim::AdamWOptions().lr(lr_).weight_decay(weight_decay_));
  make_scheduler();
}

TrainerState::~TrainerState() = default;

void TrainerState::make_scheduler() {
  scheduler_.reset();
  optim::Optimizer& opt = optimizer();
  const LrSchedule& s = schedule_;
  MT_CHECK(s.warmup_steps >= -1, "warmup steps must be >= 0 (or -1: a tenth of the steps), got ", s.warmup_steps);
  const int64_t warmup = std::min(s.warmup_steps < 0 ? steps_ / 10 : s.warmup_steps, steps_);
  const int64_t decay = std::max<int64_t>(1, steps_ - warmup);
  if (warmup > 0 && s.cosine) {
    auto w = std::make_shared<optim::LinearLR>(opt, 1.0 / static_cast<double>(warmup), 1.0, warmup);
    auto c = std::make_shared<optim::CosineAnnealingLR>(opt, decay);
    scheduler_ = std::make_unique<optim::SequentialLR>(opt, std::vector<std::shared_ptr<optim::LRScheduler>>{w, c},
                                                       std::vector<int64_t>{warmup});
  } else if (warmup > 0) {
    scheduler_ = std::make_unique<optim::LinearLR>(opt, 1.0 / static_cast<double>(warmup), 1.0, warmup);
  } else if (s.cosine) {
    scheduler_ = std::make_unique<optim::CosineAnnealingLR>(opt, decay);
  }
}

void TrainerState::shard(nn::DistributedDataParallel& ddp) {
  const double lr = lr_, wd = weight_decay_;
  zero_ = std::make_unique<distributed::ZeroRedundancyOptimizer>(ddp, [lr, wd](std::vector<optim::ParamGroup> groups) {
    return std::make_unique<optim::AdamW>(std::move(groups), optim::AdamWOptions().lr(lr).weight_decay(wd));
  });
  scheduler_.reset();
  full_.reset();  // never stepped: it holds no state, and the shard's optimizer replaces it
  make_scheduler();
}

void TrainerState::plan_shard(int world) {
  MT_CHECK(world >= 1, "plan_shard: world size ", world, " (expected >= 1)");
  const std::vector<Tensor> params = model_.parameters();
  planned_pieces_ = distributed::zero_pieces(params, nn::DistributedDataParallelOptions(), 0, world);
  {
    NoGradGuard no_grad;
    for (const distributed::ZeroPiece& piece : planned_pieces_)
      planned_shard_.push_back(distributed::piece_of(params[piece.param].detach(), piece));
  }
  scheduler_.reset();
  full_ = std::make_unique<optim::AdamW>(planned_shard_, optim::AdamWOptions().lr(lr_).weight_decay(weight_decay_));
  make_scheduler();
}

void TrainerState::take_shard_gradients() {
  const std::vector<Tensor> params = model_.parameters();
  for (size_t i = 0; i < planned_shard_.size(); ++i)
    planned_shard_[i].set_grad(distributed::piece_of(params[planned_pieces_[i].param].grad(), planned_pieces_[i]));
}

void TrainerState::reshard() {
  scheduler_.reset();
  zero_->reshard();
  make_scheduler();
}

optim::Optimizer& TrainerState::optimizer() { return zero_ ? zero_->optimizer() : *full_; }

void TrainerState::zero_grad() {
  if (zero_)
    zero_->zero_grad();
  else
    full_->zero_grad();
  // A planned shard's optimizer sees views: the whole gradients are the model's to drop.
  if (!planned_shard_.empty())
    for (Tensor& param : model_.parameters()) param.set_grad(Tensor());
}

Tensor TrainerState::clip_grad_norm_(double max_norm) {
  if (zero_) return zero_->clip_grad_norm_(max_norm);
  return nn::utils::clip_grad_norm_(planned_shard_.empty() ? model_.parameters() : planned_shard_, max_norm);
}

amp::StepOutcome TrainerState::step() { return zero_ ? zero_->step(scaler_) : scaler_.step(*full_); }

int64_t TrainerState::load(const std::string& dir, TrainTask& task, bool fresh) {
  io::CheckpointParts parts;
  parts.scheduler = scheduler_.get();
  parts.data = task.loader();
  parts.fp8 = fp8_;
  const int64_t done = zero_ ? distributed::load_checkpoint(dir, model_, *zero_, scaler_, nullptr, parts)
                             : io::load_checkpoint(dir, model_, *full_, scaler_, nullptr, parts);
  if (!parts.data) {
    if (fresh)
      task.skip_batches(done);  // from a task's start: any task can
    else
      task.seek_batches(done);
  }
  return done;
}

void TrainerState::save(const std::string& dir, int64_t step, TrainTask& task, bool writer) {
  const io::CheckpointParts parts{scheduler_.get(), task.loader(), fp8_};
  if (!zero_) {
    if (writer) io::save_checkpoint(dir, model_, *full_, scaler_, step, nlohmann::json::object(), parts);
  } else if (checkpoint_sharded_) {
    distributed::save_sharded_checkpoint(dir, model_, *zero_, scaler_, step, nlohmann::json::object(), parts);
  } else {
    distributed::save_checkpoint(dir, model_, *zero_, scaler_, step, nlohmann::json::object(), parts);
  }
}

}  // namespace mixtrain::train
