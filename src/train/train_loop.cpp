// The training loop (train_loop.h): one step from zero_grad to the scheduler, run plain or from a
// memory plan, under DDP when a launcher started several ranks, elastic under `mixtrain launch --elastic`.
#include "mixtrain/train/train_loop.h"

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <memory>
#include <ostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "mixtrain/amp/autocast.h"
#include "mixtrain/amp/fp8.h"
#include "mixtrain/amp/grad_scaler.h"
#include "mixtrain/base/error.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/distributed/ddp.h"
#include "mixtrain/distributed/elastic.h"
#include "mixtrain/distributed/rank_shares.h"
#include "mixtrain/distributed/sampler.h"
#include "mixtrain/io/checkpoint.h"
#include "mixtrain/memory/plan_cache.h"
#include "mixtrain/nn/linear.h"
#include "train/finite_params.h"
#include "train/trainer_state.h"

namespace mixtrain::train {

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::Fp32;
  if (name == "fp16") return Precision::Fp16;
  if (name == "bf16") return Precision::Bf16;
  if (name == "fp8") return Precision::Fp8;
  MT_ERROR("unknown precision '", name, "' (expected fp32, fp16, bf16 or fp8)");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::Fp32: return "fp32";
    case Precision::Fp16: return "fp16";
    case Precision::Bf16: return "bf16";
    case Precision::Fp8: return "fp8";
  }
  return "?";
}

ForwardScope::ForwardScope(DeviceType device, Precision p, const amp::Fp8Recipe& recipe) {
  if (p == Precision::Fp8) fp8_.emplace(device, recipe);
  else autocast_.emplace(device, p == Precision::Bf16 ? kBFloat16 : kFloat16, p != Precision::Fp32);
}

std::unique_ptr<amp::Fp8Scaling> make_fp8_scaling(nn::Module& model, Precision p, const amp::Fp8Recipe& recipe) {
  return p == Precision::Fp8 ? std::make_unique<amp::Fp8Scaling>(model, recipe) : nullptr;
}

int rank_cuda_index(const distributed::LaunchEnv& env) { return env.world_size > 1 ? env.local_rank : 0; }

// Not checked here: a default is set before the flags are read, and `--device cpu` on a rank whose
// GPU does not exist must not fail on it; train() checks the device it is given.
Device default_device() {
  return cuda::is_available() ? Device::cuda(rank_cuda_index(distributed::read_launch_env())) : Device::cpu();
}

// `name`: as the user spelled it ("cuda" is this rank's GPU under a launcher).
void check_device_available(const Device& d, const std::string& name) {
  if (!d.is_cuda()) return;
  std::string what = "'" + name + "'";
  if (name == "cuda" && d.index != 0) what += " (" + d.str() + ", this rank's LOCAL_RANK)";
  MT_CHECK(cuda::is_available() && d.index < cuda::device_count(), "device ", what, " is not available: ",
           cuda::is_available() ? "no such CUDA device" : "no CUDA device (or built without CUDA)", "; use --device cpu");
}

Device parse_device(const std::string& name) {
  MT_CHECK(name == "cpu" || name.rfind("cuda", 0) == 0, "unknown device '", name, "' (expected cpu or cuda)");
  // The launch environment is read only for plain "cuda": a CPU run never depends on it.
  const Device d = name == "cuda" ? Device::cuda(rank_cuda_index(distributed::read_launch_env())) : Device::parse(name);
  check_device_available(d, name);
  return d;
}

Tensor DataShard::rows(const Tensor& batch) const {
  if (weights.empty()) return batch;
  const std::vector<int64_t> sizes = distributed::DistributedSampler::split(batch.size(0), weights);
  // Every rank splits the same batch the same way, so every rank stops here together, before any
  // rank computes on no rows and the others wait for it.
  for (size_t r = 0; r < sizes.size(); ++r) {
    if (sizes[r] > 0) continue;
    std::ostringstream w;
    for (size_t k = 0; k < weights.size(); ++k) w << (k ? "," : "") << weights[k];
    MT_ERROR("data parallel: a global batch of ", batch.size(0), " rows split over ", sizes.size(),
             " ranks by weights ", w.str(), " gives rank ", r, " no rows; use a global batch of at least one row ",
             "per rank (", sizes.size(), "), or weights closer together");
  }
  int64_t begin = 0;
  for (int r = 0; r < rank; ++r) begin += sizes[static_cast<size_t>(r)];
  return batch.narrow(0, begin, sizes[static_cast<size_t>(rank)]).contiguous();
}

void TrainTask::seek_batches(int64_t) {
  MT_ERROR("this trainer (", describe(), ") cannot move its data stream back (TrainTask::seek_batches), which ",
           "elastic training needs to redo a step on its batch; train it with mixtrain launch --max-restarts instead");
}

void TrainTask::seek_stream(int64_t n, data::DataLoader* loader, const nlohmann::json& start, size_t& next) {
  MT_CHECK(n >= 0, "seek_batches: negative batch count ", n);
  if (!loader) {
    next = static_cast<size_t>(n);
    return;
  }
  loader->load_state_dict(start);  // where it stood before the first batch
  loader->skip(n);
}

data::DataLoaderOptions TrainTask::training_loader_options(int64_t batch_size, Device device) {
  return data::DataLoaderOptions().batch_size(batch_size).num_workers(1).device(device).pin_memory(device.is_cuda());
}

std::vector<int64_t> TrainTask::shapes_key(std::initializer_list<Tensor> tensors) {
  std::vector<int64_t> key;
  for (const Tensor& t : tensors) {
    for (int64_t d : t.shape()) key.push_back(d);
    key.push_back(-1);
  }
  return key;
}

int64_t parameter_count(const nn::Module& model) {
  int64_t n = 0;
  for (const auto& p : model.parameters()) n += p.numel();
  return n;
}

TrainResult train_with_log(TrainTask& task, const TrainOptions& options, std::ostream* log, int64_t log_every) {
  double window = 0;
  int64_t in_window = 0;
  auto last = std::chrono::steady_clock::now();
  return train(task, options, [&](const StepRecord& r) {
    window += r.loss;
    ++in_window;
    if (!log || log_every <= 0) return;
    if (r.step != 1 && r.step % log_every != 0 && r.step != options.steps) return;
    const auto now = std::chrono::steady_clock::now();
    const double secs = std::chrono::duration<double>(now - last).count();
    last = now;
    *log << "step " << std::setw(6) << r.step << "  loss " << std::fixed << std::setprecision(4)
         << window / static_cast<double>(in_window) << "  scale " << std::defaultfloat << r.scale << "  ("
         << std::fixed << std::setprecision(1) << static_cast<double>(in_window) / std::max(secs, 1e-9)
         << " steps/s)" << std::defaultfloat << std::endl;
    window = 0;
    in_window = 0;
  });
}


namespace {
// The last step's record, which an elastic member sends with its state to one a step behind.
nlohmann::json step_record_json(const StepRecord& r) {
  return {{"step", r.step}, {"lr", r.lr}, {"loss", r.loss}, {"scale", r.scale}, {"skipped", r.skipped},
          {"grad_norm", r.grad_norm}, {"rank_rows", r.rank_rows}};
}
StepRecord step_record_from_json(const nlohmann::json& j) {
  StepRecord r;
  if (j.is_null()) return r;
  r.step = j.at("step").get<int64_t>();
  r.lr = j.at("lr").get<double>();
  r.loss = j.at("loss").get<double>();
  r.scale = j.at("scale").get<double>();
  r.skipped = j.at("skipped").get<bool>();
  r.grad_norm = j.at("grad_norm").get<double>();
  r.rank_rows = j.at("rank_rows").get<std::vector<int64_t>>();
  return r;
}
}  // namespace

TrainResult train(TrainTask& task, const TrainOptions& options, const std::function<void(const StepRecord&)>& on_step) {
  using clock = std::chrono::steady_clock;
  MT_CHECK(options.save_every >= 0, "save_every must be >= 0, got ", options.save_every);
  check_device_available(options.device, "cuda");
  // Only rank 0 writes checkpoints; a destination it cannot write fails now, not after the run.
  // (Elastic: whoever is rank 0 then; the first generation's rank 0 checks.)
  if (!options.save_dir.empty() && distributed::read_launch_env().rank == 0)
    io::check_checkpoint_destination(options.save_dir);
  nn::Module& model = task.model();
  model.to(options.device);
  // bf16 has fp32's range: no loss scaling needed, so the scaler is a pass-through there.
  amp::GradScaler scaler(amp::GradScalerOptions()
                             .init_scale(options.init_scale)
                             .enabled(options.precision == Precision::Fp16));
  // AdamW and its schedule; sharded (ZeRO-1) once the DDP exists. FP8: the Linear layers' scaling
  // state, saved and loaded with the rest.
  // Declared before the optimizer state: a ZeRO optimizer refers to the DDP it shards, so the DDP
  // must outlive it (members are destroyed in reverse order).
  std::unique_ptr<nn::DistributedDataParallel> ddp;
  TrainerState state(model, scaler, options, task.schedule());
  const std::unique_ptr<amp::Fp8Scaling> fp8 = make_fp8_scaling(model, options.precision, options.fp8_recipe);
  state.set_fp8(fp8.get());

  // A run restarted by its launcher (--max-restarts) goes on from its last checkpoint.
  const distributed::LaunchEnv launch = distributed::read_launch_env();
  TrainResult result;
  result.resumed_from = options.resume_dir;
  if (launch.restart_count > 0 && !options.save_dir.empty() && io::checkpoint_exists(options.save_dir))
    result.resumed_from = options.save_dir;
  const bool sharded = options.zero_stage > 0 && launch.world_size > 1;
  // (A joiner gets the job's state instead; a sharded run loads once its shard exists.)
  if (!result.resumed_from.empty() && !launch.elastic_join && !sharded)
    result.first_step = state.load(result.resumed_from, task, true) + 1;

  // Data parallel under a launcher: rank 0's parameters everywhere, each rank its share. The
  // process group holds the shares (the launcher's, or the options'), and DDP moves adaptive ones.
  std::unique_ptr<distributed::ElasticAgent> agent;  // --elastic: survivors go on without a restart
  nlohmann::json received_step;  // elastic: the record of a step this rank took from another
  bool rollback = false;         // elastic ZeRO: the membership changed, so back to the last checkpoint
  distributed::RankShares shares;
  if (launch.world_size > 1) {
    if (!launch.elastic && !distributed::is_initialized()) distributed::init_process_group();
    // The default group took the launcher's shares when it was made; an elastic job's groups are
    // the agent's, so they are read here (a joiner's placeholder world size is 1: its weight is
    // its own, $MIXTRAIN_ELASTIC_WEIGHT).
    const int world = launch.elastic_join ? 1 : launch.world_size;
    shares = launch.elastic ? distributed::launch_rank_shares(world) : distributed::default_group().rank_shares();
    if (!options.rank_weights.empty()) {
      distributed::check_rank_weights(options.rank_weights, world, "rank weights (train's options)");
      shares.weights = options.rank_weights;
      shares.by_memory = false;
    }
    shares.adaptive = shares.adaptive || options.adaptive_rank_weights;
    // The launcher's --rank-batches auto needs each rank's fit found by dry run, which only
    // `mixtrain train` does (before the task exists); refuse rather than split evenly.
    MT_CHECK(!shares.by_memory, "MIXTRAIN_RANK_BATCHES (mixtrain launch --rank-batches auto) is resolved by ",
             "`mixtrain train`; this trainer takes fixed shares: use --rank-weights instead");
    std::shared_ptr<distributed::ProcessGroup> group;
    if (launch.elastic) {
      MT_CHECK(!options.memory_plan, "--memory-plan cannot train with --elastic (a redone step's shapes change)");
      agent = std::make_unique<distributed::ElasticAgent>(
          distributed::ElasticOptions().rank_weights(launch.elastic_join ? std::vector<double>{} : shares.weights));
      agent->set_steps(result.first_step - 1);
      // Sharded state cannot be sent to a joiner: a ZeRO job goes back to its last checkpoint
      // at every change instead (rollback, below).
      // With the state goes the last step's record and whether the job's shares are adaptive: a
      // joiner's launcher gives it only its own weight, and DDP's balancer adds collectives to
      // every step, so a joiner must follow the job in that.
      agent->set_state({&model, sharded ? nullptr : &state.optimizer(), &scaler, sharded ? nullptr : state.scheduler(),
                        [&] {
                          return nlohmann::json{{"step", result.records.empty() ? nlohmann::json()
                                                                                : step_record_json(result.records.back())},
                                                {"adaptive", shares.adaptive}};
                        },
                        [&](const nlohmann::json& j) {
                          received_step = j.at("step");
                          shares.adaptive = j.at("adaptive").get<bool>();
                        }});
      // Each generation's group shares the global batch by its members' weights (and DDP's
      // balancer, when adaptive, starts again from them).
      auto follow_members = [&](distributed::ProcessGroup& g, const std::vector<double>& weights) {
        distributed::RankShares s;
        s.weights = weights;
        s.adaptive = shares.adaptive;
        g.set_rank_shares(s);
      };
      agent->on_change([&, follow_members](const distributed::MembershipChange& c) {
        follow_members(*agent->group(), c.weights);  // the global batch re-split among the members
        task.set_data_shard(c.rank, c.weights);
        if (ddp) ddp->set_process_group(agent->group());
        if (state.sharded()) state.reshard();
        rollback = sharded;  // the shard of a rank that left is lost: back to the last checkpoint
      });
      agent->start();
      group = agent->group();
      follow_members(*group, agent->weights());
      if (agent->joined_late()) task.seek_batches(agent->steps());
      result.first_step = agent->steps() + 1;
    } else {
      distributed::default_group().set_rank_shares(shares);
    }
    // DDP's construction (the model's signature all-gathered, rank 0's parameters broadcast) runs
    // through the elastic agent like a step: a rank lost in it leaves the others to go on.
    distributed::kill_if_asked(0);  // the failure tests' kill -9 before DDP's construction
    auto make_ddp = [&](bool init_sync) {
      const std::shared_ptr<distributed::ProcessGroup> pg = agent ? agent->group() : group;
      distributed::ProcessGroup& g = pg ? *pg : distributed::default_group();
      shares = g.rank_shares();
      task.set_data_shard(g.rank(), shares.weights_for(g.world_size()));
      ddp = std::make_unique<nn::DistributedDataParallel>(model.shared_from_this(), pg,
                                                          nn::DistributedDataParallelOptions().init_sync(init_sync));
      ddp->sync_grad_scaler(scaler);
      if (fp8) ddp->sync_fp8(*fp8);
    };
    if (agent) {
      agent->run_collectives([&](int) { make_ddp(!agent->joined_late()); });
      // A rank that joined again or took the state in a recovery holds the job's parameters.
      if (!ddp) make_ddp(false);
    } else {
      make_ddp(true);
    }
    if (sharded) {
      state.shard(*ddp);
      if (!result.resumed_from.empty() && !launch.elastic_join)
        result.first_step = state.load(result.resumed_from, task, true) + 1;
      rollback = agent && agent->joined_late();
    }
  }

  FiniteParams finite_params(model);
  int64_t current_step = 0;
  // One step, from zero_grad to the scheduler, returning values only: with a plan, nothing the
  // step allocates outlives it but optimizer and scaler state.
  struct StepValues {
    double loss = 0, grad_norm = 0;
    bool skipped = false;
    bool params_finite = true;
    std::vector<int64_t> rank_rows;
  };
  auto run_step = [&]() -> StepValues {
    StepValues v;
    // Adaptive shares move at the end of a backward (DDP's balancer), and an elastic job's with
    // its members: this step's rows are split by the shares it started with.
    std::vector<double> weights;
    if (ddp) {
      const distributed::RankShares now = ddp->group().rank_shares();
      if (now.changes != shares.changes) task.set_data_shard(ddp->group().rank(), now.weights_for(ddp->group().world_size()));
      shares = now;
      weights = now.weights_for(ddp->group().world_size());
    }
    state.zero_grad();
    Tensor loss;
    {
      const ForwardScope scope(options.device.type, options.precision, options.fp8_recipe);
      if (ddp) ddp->prepare_forward();
      loss = task.next_loss();
      if (ddp) {
        MT_CHECK(task.last_batch_rows() > 0, "this trainer (", task.describe(), ") does not shard its batches ",
                 "(its next_loss does not call take_shard), so it cannot train data-parallel; run it as one process");
        // Every rank drew the same global batch, so its size needs no collective.
        ddp->set_local_batch(task.last_batch_rows(), task.last_global_rows());
      }
    }
    // The global batch's loss, each rank's mean weighted by its share, summed while backward
    // runs: queued before the gradient buckets, it is done when they are.
    Tensor global_loss;
    distributed::Work global_loss_work;
    if (ddp) {
      NoGradGuard no_grad;
      global_loss = loss.detach().to(kFloat32) * ddp->gradient_weight();
      global_loss_work = ddp->group().all_reduce_async(global_loss);
    }
    // Data parallel: this rank's rows' part of the global mean (loss times n_r/N) is what goes
    // back, so the gradients have one process's magnitude and fp16 overflows where it would.
    scaler.scale(ddp ? ddp->scale_loss(loss) : loss).backward();
    if (ddp) v.rank_rows = distributed::DistributedSampler::split(task.last_global_rows(), weights);
    scaler.unscale_(state.optimizer());
    Tensor grad_norm;
    if (options.clip_norm > 0) grad_norm = state.clip_grad_norm_(options.clip_norm);
    try {  // the optimizer refuses rates it cannot apply before it writes anything; say which step
      state.optimizer().check_step_scalars();
    } catch (const Error& e) {
      MT_ERROR("step ", current_step, ": ", e.what());
    }
    const amp::StepOutcome stepped = state.step();
    scaler.update();
    if (fp8) fp8->update();  // once per optimizer step (a skipped one too: its amaxes were seen)
    if (state.scheduler()) state.scheduler()->step(stepped);  // a skipped step leaves the schedule where it was
    finite_params.scan();  // queued after the update, read after the loss
    if (ddp) {
      global_loss_work.wait();
      v.loss = global_loss.item<double>();
    } else {
      v.loss = loss.item<double>();  // waits for the device, after the update is queued
    }
    if (grad_norm.defined()) v.grad_norm = grad_norm.item<double>();
    v.skipped = !stepped;          // decided on the device; known by now
    v.params_finite = finite_params.all_finite();
    // Planned: the gradients die inside the step, so they come from the arena too. The next
    // step's zero_grad would drop them anyway; nothing reads them in between.
    if (options.memory_plan) state.zero_grad();
    return v;
  };

  std::unique_ptr<memory::PlanCache> plans;
  if (options.memory_plan) plans = std::make_unique<memory::PlanCache>(options.device);
  const memory::Stats plan_stats0 = memory::stats(options.device);
  memory::reset_peak_stats(options.device);
  const auto start = clock::now();
  // Elastic ZeRO after a membership change: every rank goes back to the last checkpoint, resharded
  // for the new world size, and computes the steps since then again. Returns the checkpoint's step.
  auto roll_back = [&]() -> int64_t {
    MT_CHECK(!options.save_dir.empty() && io::checkpoint_exists(options.save_dir), "elastic ZeRO: the membership ",
             "changed and the optimizer shard of a rank that left is lost; training goes back to its last checkpoint, ",
             "and there is none (give --save and --save-every)");
    const int64_t done = state.load(options.save_dir, task, false);
    agent->set_steps(done);
    rollback = false;
    return done;
  };
  for (int64_t step = result.first_step; step <= options.steps; ++step) {
    if (rollback) {
      step = roll_back();
      continue;
    }
    distributed::kill_if_asked(step);  // the failure tests' kill -9 at a chosen step
    current_step = step;
    const auto t0 = clock::now();
    StepRecord rec;
    rec.step = step;
    rec.scale = scaler.get_scale();
    rec.lr = state.optimizer().param_groups()[0].options().get_lr();
    StepValues v;
    auto attempt = [&](int redo) {
      if (rollback) return;                        // elastic ZeRO: to the checkpoint instead (below)
      if (redo > 0) task.seek_batches(step - 1);  // elastic: the interrupted step again, on its batch
      if (plans) {
        std::vector<int64_t> key = task.prepare_batch();
        // The batch's shapes are the global batch's: a new split changes this rank's share of it.
        if (shares.adaptive) key.push_back(ddp->group().rank_shares().changes);
        v = plans->run(key, run_step);
      } else {
        v = run_step();
      }
    };
    bool completed = true;
    if (agent)
      completed = agent->run_step(attempt);
    else
      attempt(0);
    if (rollback) {
      step = roll_back();
      continue;
    }
    if (!completed) {
      // A rank died in the step's last collective after it completed on others: this rank took
      // their state, and the step's record with it (or it joined again, further on).
      rec = step_record_from_json(received_step);
      step = agent->steps();
      task.seek_batches(step);
    } else {
      rec.loss = v.loss;
      rec.grad_norm = v.grad_norm;
      rec.skipped = v.skipped;
      rec.rank_rows = v.rank_rows;
    }
    rec.rank = ddp ? ddp->group().rank() : 0;
    rec.seconds = std::chrono::duration<double>(clock::now() - t0).count();
    result.skipped_steps += rec.skipped;
    result.records.push_back(rec);
    if (on_step) on_step(rec);  // the log and the progress line get the step that stops the run too
    // A non-finite loss that loss scaling cannot recover from (fp32/bf16, or fp16 with the scale
    // at its floor) ends the run with an Error naming the step, instead of training on NaN.
    scaler.check_loss(rec.loss, step);
    // Parameters the update made inf or NaN end the run here, before any checkpoint holds them
    // (fp16's scaler would otherwise skip every later step on their NaN loss).
    if (completed && !v.params_finite) finite_params.refuse(step);
    const bool last = step >= options.steps;
    if (!options.save_dir.empty() && (last || (options.save_every > 0 && step % options.save_every == 0))) {
      // Data parallel: the replicas are identical; rank 0 writes once every rank is done with
      // the step, and nobody goes on (or reads it) before the file is complete.
      auto save = [&](int) {
        if (rollback) return;  // elastic ZeRO: this state is being given up
        if (ddp) ddp->group().barrier();
        state.save(options.save_dir, step, task, !ddp || ddp->group().rank() == 0);
        if (ddp) ddp->group().barrier();
      };
      if (agent)
        agent->run_collectives(save);
      else
        save(0);
    }
    if (agent && !last && !rollback) agent->step_boundary();
    if (rollback) step = roll_back();  // the membership changed while saving, or at the boundary
  }
  result.seconds = std::chrono::duration<double>(clock::now() - start).count();
  result.memory = memory::stats(options.device);
  if (fp8) {
    result.fp8_layers = fp8->stats();
    for (const auto& [name, m] : model.named_modules()) result.linear_layers += dynamic_cast<nn::LinearImpl*>(m.get()) != nullptr;
  }
  for (const auto& [name, t] : state.optimizer().state_tensors()) result.optimizer_state_bytes += t.nbytes();
  if (plans) {
    result.memory_plans = static_cast<int64_t>(plans->size());
    result.plan_hits = result.memory.num_plan_hits - plan_stats0.num_plan_hits;
    result.plan_misses = result.memory.num_plan_misses - plan_stats0.num_plan_misses;
  }
  return result;
}

}  // namespace mixtrain::train
