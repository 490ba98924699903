// A Trainer under a launcher (DDP, the elastic agent) and its loop over steps (trainer.h).
#include <chrono>
#include <cstdlib>
#include <utility>

#include <nlohmann/json.hpp>

#include "mixtrain/base/error.h"
#include "mixtrain/io/checkpoint.h"
#include "mixtrain/nn/linear.h"
#include "mixtrain/train/predict.h"
#include "train/trainer_parts.h"

namespace mixtrain::train {

// Data parallel under a launcher: rank 0's parameters everywhere, each rank its share. The process
// group holds the shares (the launcher's, or the options'), and DDP moves adaptive ones.
void Trainer::join_launcher() {
  Parts& p = *parts_;
  const distributed::LaunchEnv& launch = p.launch;
  if (!launch.elastic && !distributed::is_initialized()) distributed::init_process_group();
  // The default group took the launcher's shares when it was made; an elastic job's groups are the
  // agent's, so they are read here (a joiner's placeholder world size is 1: its weight is its own,
  // $MIXTRAIN_ELASTIC_WEIGHT).
  const int world = launch.elastic_join ? 1 : launch.world_size;
  p.shares = launch.elastic ? distributed::launch_rank_shares(world) : distributed::default_group().rank_shares();
  if (!options_.rank_weights.empty()) {
    distributed::check_rank_weights(options_.rank_weights, world, "rank weights (train's options)");
    p.shares.weights = options_.rank_weights;
    p.shares.by_memory = false;
  }
  p.shares.adaptive = p.shares.adaptive || options_.adaptive_rank_weights;
  // --rank-batches auto is resolved before the Trainer exists (train() does, by dry run): the
  // shares here are fixed ones.
  MT_CHECK(!p.shares.by_memory, "MIXTRAIN_RANK_BATCHES (mixtrain launch --rank-batches auto) sizes each rank's ",
           "share by a dry run of the task at other batch sizes: give train() TrainOptions::planning_task (a ",
           "TaskFactory; or rank_weights from train::rank_weights_by_memory), or use --rank-weights instead");
  std::shared_ptr<distributed::ProcessGroup> group;
  if (launch.elastic)
    start_elastic(group);
  else
    distributed::default_group().set_rank_shares(p.shares);
  // DDP's construction (the model's signature all-gathered, rank 0's parameters broadcast) runs
  // through the elastic agent like a step: a rank lost in it leaves the others to go on.
  distributed::kill_if_asked(0);  // the failure tests' kill -9 before DDP's construction
  if (p.agent) {
    p.agent->run_collectives([&](int) { make_ddp(p.agent->group(), !p.agent->joined_late()); });
    // A rank that joined again or took the state in a recovery holds the job's parameters.
    if (!p.ddp) make_ddp(p.agent->group(), false);
  } else {
    make_ddp(group, true);
  }
  if (p.sharded()) {
    p.state.shard(*p.ddp);
    if (!result_.resumed_from.empty() && !launch.elastic_join)
      result_.first_step = p.state.load(result_.resumed_from, task_, true) + 1;
    p.rollback = p.agent && p.agent->joined_late();
  }
}

void Trainer::start_elastic(std::shared_ptr<distributed::ProcessGroup>& group) {
  Parts& p = *parts_;
  MT_CHECK(!options_.memory_plan, "--memory-plan cannot train with --elastic (a redone step's shapes change)");
  const bool zero = p.sharded();
  p.agent = std::make_unique<distributed::ElasticAgent>(
      distributed::ElasticOptions().rank_weights(p.launch.elastic_join ? std::vector<double>{} : p.shares.weights));
  p.agent->set_steps(result_.first_step - 1);
  // Sharded state cannot be sent to a joiner: a ZeRO job goes back to its last checkpoint at every
  // change instead (rollback). With the state goes the last step's record and whether the job's
  // shares are adaptive: a joiner's launcher gives it only its own weight, and DDP's balancer adds
  // collectives to every step, so a joiner must follow the job in that.
  p.agent->set_state({&model_, zero ? nullptr : &p.state.optimizer(), &p.scaler,
                      zero ? nullptr : p.state.scheduler(),
                      [this] {
                        const Parts& q = *parts_;
                        return nlohmann::json{
                            {"step", result_.records.empty() ? nlohmann::json() : step_record_json(result_.records.back())},
                            {"adaptive", q.shares.adaptive}};
                      },
                      [this](const nlohmann::json& j) {
                        parts_->received_step = j.at("step");
                        parts_->shares.adaptive = j.at("adaptive").get<bool>();
                      }});
  // Each generation's group shares the global batch by its members' weights (and DDP's balancer,
  // when adaptive, starts again from them).
  auto follow_members = [this](distributed::ProcessGroup& g, const std::vector<double>& weights) {
    distributed::RankShares s;
    s.weights = weights;
    s.adaptive = parts_->shares.adaptive;
    g.set_rank_shares(s);
  };
  p.agent->on_change([this, follow_members, zero](const distributed::MembershipChange& c) {
    Parts& q = *parts_;
    follow_members(*q.agent->group(), c.weights);  // the global batch re-split among the members
    task_.set_data_shard(c.rank, c.weights);
    if (q.ddp) q.ddp->set_process_group(q.agent->group());
    if (q.state.sharded()) q.state.reshard();
    q.rollback = zero;  // the shard of a rank that left is lost: back to the last checkpoint
  });
  p.agent->start();
  group = p.agent->group();
  follow_members(*group, p.agent->weights());
  if (p.agent->joined_late()) task_.seek_batches(p.agent->steps());
  result_.first_step = p.agent->steps() + 1;
}

void Trainer::make_ddp(const std::shared_ptr<distributed::ProcessGroup>& pg, bool init_sync) {
  Parts& p = *parts_;
  distributed::ProcessGroup& g = pg ? *pg : distributed::default_group();
  p.shares = g.rank_shares();
  task_.set_data_shard(g.rank(), p.shares.weights_for(g.world_size()));
  p.ddp = std::make_unique<nn::DistributedDataParallel>(model_.shared_from_this(), pg,
                                                        nn::DistributedDataParallelOptions().init_sync(init_sync));
  p.ddp->sync_grad_scaler(p.scaler);
  if (p.fp8) p.ddp->sync_fp8(*p.fp8);
}

// Elastic ZeRO after a membership change: every rank goes back to the last checkpoint, resharded
// for the new world size, and computes the steps since then again. Returns the checkpoint's step.
int64_t Trainer::roll_back() {
  Parts& p = *parts_;
  MT_CHECK(!options_.save_dir.empty() && io::checkpoint_exists(options_.save_dir), "elastic ZeRO: the membership ",
           "changed and the optimizer shard of a rank that left is lost; training goes back to its last checkpoint, ",
           "and there is none (give --save and --save-every)");
  const int64_t done = p.state.load(options_.save_dir, task_, false);
  p.agent->set_steps(done);
  p.rollback = false;
  return done;
}

// Step `step` (elastic: redone on its batch when a collective failed), its record filled. False
// when this rank took the job's state from another instead (a rank died in the step's last
// collective after it completed elsewhere), the record then the one received.
bool Trainer::run_one(int64_t step, StepRecord& rec) {
  Parts& p = *parts_;
  StepValues v;
  auto attempt = [&](int redo) {
    if (p.rollback) return;                      // elastic ZeRO: to the checkpoint instead
    if (redo > 0) task_.seek_batches(step - 1);  // elastic: the interrupted step again, on its batch
    if (p.plans) {
      std::vector<int64_t> key = task_.prepare_batch();
      // The batch's shapes are the global batch's: a new split changes this rank's share of it.
      if (p.shares.adaptive) key.push_back(p.ddp->group().rank_shares().changes);
      v = p.plans->run(key, [this] { return this->step(); });
    } else {
      v = this->step();
    }
  };
  const bool completed = p.agent ? p.agent->run_step(attempt) : (attempt(0), true);
  if (p.rollback) return true;
  if (!completed) {
    rec = step_record_from_json(p.received_step);
    return false;
  }
  rec.loss = v.loss;
  rec.grad_norm = v.grad_norm;
  rec.skipped = v.skipped;
  rec.rank_rows = v.rank_rows;
  p.params_finite = v.params_finite;
  return true;
}

void Trainer::save_if_due(int64_t step) {
  Parts& p = *parts_;
  const bool last = step >= options_.steps;
  if (options_.save_dir.empty() || !(last || (options_.save_every > 0 && step % options_.save_every == 0))) return;
  // Data parallel: the replicas are identical; rank 0 writes once every rank is done with the
  // step, and nobody goes on (or reads it) before the file is complete.
  auto save = [&](int) {
    if (p.rollback) return;  // elastic ZeRO: this state is being given up
    if (p.ddp) p.ddp->group().barrier();
    p.state.save(options_.save_dir, step, task_, !p.ddp || p.ddp->group().rank() == 0);
    if (p.ddp) p.ddp->group().barrier();
  };
  if (p.agent)
    p.agent->run_collectives(save);
  else
    save(0);
}

TrainResult Trainer::run(const std::function<void(const StepRecord&)>& on_step) {
  using clock = std::chrono::steady_clock;
  Parts& p = *parts_;
  if (options_.memory_plan) p.plans = std::make_unique<memory::PlanCache>(options_.device);
  const memory::Stats plan_stats0 = memory::stats(options_.device);
  memory::reset_peak_stats(options_.device);
  const auto start = clock::now();
  for (int64_t step = result_.first_step; step <= options_.steps; ++step) {
    if (p.rollback) {
      step = roll_back();
      continue;
    }
    distributed::kill_if_asked(step);  // the failure tests' kill -9 at a chosen step
    current_step_ = step;
    const auto t0 = clock::now();
    StepRecord rec;
    rec.step = step;
    rec.scale = p.scaler.get_scale();
    rec.lr = p.state.optimizer().param_groups()[0].options().get_lr();
    p.params_finite = true;
    const bool completed = run_one(step, rec);
    if (p.rollback) {
      step = roll_back();
      continue;
    }
    if (!completed) {
      step = p.agent->steps();
      task_.seek_batches(step);
    }
    rec.rank = p.ddp ? p.ddp->group().rank() : 0;
    rec.seconds = std::chrono::duration<double>(clock::now() - t0).count();
    result_.skipped_steps += rec.skipped;
    result_.records.push_back(rec);
    if (on_step) on_step(rec);  // the log and the progress line get the step that stops the run too
    // A non-finite loss that loss scaling cannot recover from (fp32/bf16, or fp16 with the scale
    // at its floor) ends the run with an Error naming the step, instead of training on NaN.
    p.scaler.check_loss(rec.loss, step);
    // Parameters the update made inf or NaN end the run here, before any checkpoint holds them
    // (fp16's scaler would otherwise skip every later step on their NaN loss).
    if (!p.params_finite) p.finite->refuse(step);
    save_if_due(step);
    if (p.agent && step < options_.steps && !p.rollback) p.agent->step_boundary();
    if (p.rollback) step = roll_back();  // the membership changed while saving, or at the boundary
  }
  TrainResult result = std::move(result_);
  result.seconds = std::chrono::duration<double>(clock::now() - start).count();
  finish(result, plan_stats0);
  return result;
}

void Trainer::finish(TrainResult& result, const memory::Stats& plan_stats0) {
  Parts& p = *parts_;
  result.memory = memory::stats(options_.device);
  if (p.fp8) {
    result.fp8_layers = p.fp8->stats();
    for (const auto& [name, m] : model_.named_modules())
      result.linear_layers += dynamic_cast<nn::LinearImpl*>(m.get()) != nullptr;
  }
  for (const auto& [name, t] : p.state.optimizer().state_tensors()) result.optimizer_state_bytes += t.nbytes();
  if (p.plans) {
    result.memory_plans = static_cast<int64_t>(p.plans->size());
    result.plan_hits = result.memory.num_plan_hits - plan_stats0.num_plan_hits;
    result.plan_misses = result.memory.num_plan_misses - plan_stats0.num_plan_misses;
  }
}

namespace {
// Bytes the task's model already holds on `device`, which a rank's memory budget no longer shows
// but its predicted step counts.
int64_t model_bytes_on(const nn::Module& model, Device device) {
  int64_t bytes = 0;
  for (const Tensor& t : model.parameters()) bytes += t.device() == device ? t.nbytes() : 0;
  for (const Tensor& t : model.buffers()) bytes += t.device() == device ? t.nbytes() : 0;
  return bytes;
}
}  // namespace

TrainResult train(TrainTask& task, const TrainOptions& options, const std::function<void(const StepRecord&)>& on_step) {
  TrainOptions o = options;
  std::string report;
  if (o.rank_weights.empty() && o.planning_task) {
    StepQuery query;
    query.options = o;
    query.target = o.device;
    // A budget measured as free memory no longer shows what the task's model holds, which the
    // prediction counts; a budget given ($MIXTRAIN_RANK_MEMORY) is the rank's whole.
    const int64_t held = std::getenv(distributed::kRankMemoryEnv) ? 0 : model_bytes_on(task.model(), o.device);
    o.rank_weights = rank_weights_by_memory(o.planning_task, query, task.batch_size(), held, &report);
  }
  TrainResult result = Trainer(task, o).run(on_step);
  result.rank_shares_report = report;
  return result;
}

}  // namespace mixtrain::train
