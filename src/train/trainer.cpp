// The Trainer's parts and its one step (trainer.h); the loop over steps is in trainer_run.cpp.
#include "mixtrain/train/trainer.h"

#include <nlohmann/json.hpp>

#include "mixtrain/amp/fp8.h"
#include "mixtrain/amp/grad_scaler.h"
#include "mixtrain/base/error.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/distributed/ddp.h"
#include "mixtrain/distributed/elastic.h"
#include "mixtrain/distributed/rank_shares.h"
#include "mixtrain/distributed/sampler.h"
#include "mixtrain/io/checkpoint.h"
#include "mixtrain/memory/dry_run.h"
#include "train/trainer_parts.h"

namespace mixtrain::train {

namespace {
// bf16 has fp32's range: no loss scaling needed, so the scaler is a pass-through there.
amp::GradScalerOptions scaler_options(const TrainOptions& options) {
  return amp::GradScalerOptions().init_scale(options.init_scale).enabled(options.precision == Precision::Fp16);
}
}  // namespace

Trainer::Parts::Parts(nn::Module& model, const TrainOptions& options, const LrSchedule& schedule)
    : options(options),
      scaler(scaler_options(options)),
      state(model, scaler, options, schedule),
      fp8(make_fp8_scaling(model, options.precision, options.fp8_recipe)) {
  state.set_fp8(fp8.get());
}

Trainer::Trainer(TrainTask& task, const TrainOptions& options, const PlannedRank& rank)
    : task_(task), options_(options), model_(task.model()) {
  model_.to(options_.device);
  parts_ = std::make_unique<Parts>(model_, options_, task.schedule());
  parts_->finite = std::make_unique<FiniteParams>(model_);
  const int64_t global = task.batch_size();
  MT_CHECK(rank.rows >= 0 && (rank.rows == 0 || (global > 0 && rank.rows <= global)), "a planned rank's batch of ",
           rank.rows, " samples must lie in [1, ", global, "], the global batch");
  // Rank 0 of two whose shares are `rows` and the rest: its step computes on its rows only.
  if (rank.rows > 0 && rank.rows < global)
    task.set_data_shard(0, {static_cast<double>(rank.rows), static_cast<double>(global - rank.rows)});
  if (options_.zero_stage == 1) parts_->state.plan_shard(rank.world_size);
}

Trainer::Trainer(TrainTask& task, const TrainOptions& options)
    : task_(task), options_(options), model_(task.model()) {
  MT_CHECK(options.save_every >= 0, "save_every must be >= 0, got ", options.save_every);
  check_device_available(options.device, "cuda");
  const distributed::LaunchEnv launch = distributed::read_launch_env();
  // Only rank 0 writes checkpoints; a destination it cannot write fails now, not after the run.
  // (Elastic: whoever is rank 0 then; the first generation's rank 0 checks.)
  if (!options.save_dir.empty() && launch.rank == 0) io::check_checkpoint_destination(options.save_dir);
  model_.to(options_.device);
  parts_ = std::make_unique<Parts>(model_, options_, task.schedule());
  parts_->launch = launch;
  // A run restarted by its launcher (--max-restarts) goes on from its last checkpoint.
  result_.resumed_from = options.resume_dir;
  if (launch.restart_count > 0 && !options.save_dir.empty() && io::checkpoint_exists(options.save_dir))
    result_.resumed_from = options.save_dir;
  // (A joiner gets the job's state instead; a sharded run loads once its shard exists.)
  if (!result_.resumed_from.empty() && !launch.elastic_join && !parts_->sharded())
    result_.first_step = parts_->state.load(result_.resumed_from, task_, true) + 1;
  if (launch.world_size > 1) join_launcher();
  parts_->finite = std::make_unique<FiniteParams>(model_);
}

Trainer::~Trainer() = default;

optim::Optimizer& Trainer::optimizer() { return parts_->state.optimizer(); }
amp::GradScaler& Trainer::scaler() { return parts_->scaler; }

// Adaptive shares move at the end of a backward (DDP's balancer), and an elastic job's with its
// members: a step's rows are split by the shares it starts with.
void Trainer::follow_shares() {
  Parts& p = *parts_;
  const distributed::RankShares now = p.ddp->group().rank_shares();
  if (now.changes != p.shares.changes)
    task_.set_data_shard(p.ddp->group().rank(), now.weights_for(p.ddp->group().world_size()));
  p.shares = now;
}

StepValues Trainer::step() {
  Parts& p = *parts_;
  if (p.ddp) follow_shares();
  p.state.zero_grad();
  Tensor loss;
  {
    // On meta (a dry run) the forward follows the autocast state of the device planned for.
    const DeviceType device = options_.device.is_meta() ? memory::dry_run_target().type : options_.device.type;
    const ForwardScope scope(device, options_.precision, options_.fp8_recipe);
    if (p.ddp) p.ddp->prepare_forward();
    loss = task_.next_loss();
    if (p.ddp) {
      MT_CHECK(task_.last_batch_rows() > 0, "this trainer (", task_.describe(), ") does not shard its batches ",
               "(its next_loss does not call take_shard), so it cannot train data-parallel; run it as one process");
      // Every rank drew the same global batch, so its size needs no collective.
      p.ddp->set_local_batch(task_.last_batch_rows(), task_.last_global_rows());
    }
  }
  // The global batch's loss, each rank's mean weighted by its share, summed while backward runs:
  // queued before the gradient buckets, it is done when they are.
  Tensor global_loss;
  distributed::Work global_loss_work;
  if (p.ddp) {
    NoGradGuard no_grad;
    global_loss = loss.detach().to(kFloat32) * p.ddp->gradient_weight();
    global_loss_work = p.ddp->group().all_reduce_async(global_loss);
  }
  // Data parallel: this rank's rows' part of the global mean (loss times n_r/N) is what goes back,
  // so the gradients have one process's magnitude and fp16 overflows where it would.
  p.scaler.scale(p.ddp ? p.ddp->scale_loss(loss) : loss).backward();
  std::vector<int64_t> rank_rows;
  if (p.ddp)
    rank_rows = distributed::DistributedSampler::split(task_.last_global_rows(),
                                                       p.shares.weights_for(p.ddp->group().world_size()));
  p.state.take_shard_gradients();
  p.scaler.unscale_(p.state.optimizer());
  Tensor grad_norm;
  if (options_.clip_norm > 0) grad_norm = p.state.clip_grad_norm_(options_.clip_norm);
  try {  // the optimizer refuses rates it cannot apply before it writes anything; say which step
    p.state.optimizer().check_step_scalars();
  } catch (const Error& e) {
    MT_ERROR("step ", current_step_, ": ", e.what());
  }
  const amp::StepOutcome stepped = p.state.step();
  p.scaler.update();
  if (p.fp8) p.fp8->update();  // once per optimizer step (a skipped one too: its amaxes were seen)
  // A skipped step leaves the schedule where it was (a planned step on meta cannot know: the
  // schedule allocates nothing, so it stays).
  if (p.state.scheduler() && !options_.device.is_meta()) p.state.scheduler()->step(stepped);
  p.finite->scan();  // queued after the update, read after the loss
  if (p.ddp) global_loss_work.wait();
  return read_values(loss, global_loss, grad_norm, stepped, std::move(rank_rows));
}

StepValues Trainer::read_values(const Tensor& loss, const Tensor& global_loss, const Tensor& grad_norm,
                                const amp::StepOutcome& stepped, std::vector<int64_t> rank_rows) {
  StepValues v;
  v.rank_rows = std::move(rank_rows);
  if (!options_.device.is_meta()) {
    // The loss waits for the device, after the update is queued.
    v.loss = global_loss.defined() ? global_loss.item<double>() : loss.item<double>();
    if (grad_norm.defined()) v.grad_norm = grad_norm.item<double>();
    v.skipped = !stepped;  // decided on the device; known by now
    v.params_finite = parts_->finite->all_finite();
  }
  // Planned: the gradients die inside the step, so they come from the arena too. The next step's
  // zero_grad would drop them anyway; nothing reads them in between.
  if (options_.memory_plan) parts_->state.zero_grad();
  return v;
}

}  // namespace mixtrain::train
