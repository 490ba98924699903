// The training loop (train_loop.h): one step from zero_grad to the scheduler, run plain or from a
// memory plan, under DDP when a launcher started several ranks.
#include "mixtrain/train/train_loop.h"

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <memory>
#include <ostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "mixtrain/amp/autocast.h"
#include "mixtrain/amp/grad_scaler.h"
#include "mixtrain/autograd/grad_mode.h"
#include "mixtrain/core/error.h"
#include "mixtrain/distributed/ddp.h"
#include "mixtrain/distributed/sampler.h"
#include "mixtrain/io/checkpoint.h"
#include "mixtrain/memory/plan_cache.h"
#include "mixtrain/nn/utils.h"
#include "mixtrain/optim/adamw.h"
#include "mixtrain/optim/schedulers.h"

namespace mixtrain::train {

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::Fp32;
  if (name == "fp16") return Precision::Fp16;
  if (name == "bf16") return Precision::Bf16;
  MT_ERROR("unknown precision '", name, "' (expected fp32, fp16 or bf16)");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::Fp32: return "fp32";
    case Precision::Fp16: return "fp16";
    case Precision::Bf16: return "bf16";
  }
  return "?";
}

int rank_cuda_index(const distributed::LaunchEnv& env) { return env.world_size > 1 ? env.local_rank : 0; }

Device default_device() { return cuda::is_available() ? parse_device("cuda") : Device::cpu(); }

Device parse_device(const std::string& name) {
  MT_CHECK(name == "cpu" || name.rfind("cuda", 0) == 0, "unknown device '", name, "' (expected cpu or cuda)");
  // The launch environment is read only for plain "cuda": a CPU run never depends on it.
  const int rank_index = name == "cuda" ? rank_cuda_index(distributed::read_launch_env()) : 0;
  const Device d = name == "cuda" ? Device::cuda(rank_index) : Device::parse(name);
  std::string what = "'" + name + "'";
  if (name == "cuda" && rank_index != 0) what += " (" + d.str() + ", this rank's LOCAL_RANK)";
  MT_CHECK(
      !d.is_cuda() || (cuda::is_available() && d.index < cuda::device_count()), "device ", what,
      " is not available: ", cuda::is_available() ? "no such CUDA device" : "no CUDA device (or built without CUDA)",
      "; use --device cpu");
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
std::unique_ptr<optim::LRScheduler> make_scheduler(optim::Optimizer& opt, const LrSchedule& s, int64_t steps) {
  MT_CHECK(s.warmup_steps >= -1, "warmup steps must be >= 0 (or -1: a tenth of the steps), got ", s.warmup_steps);
  const int64_t warmup = std::min(s.warmup_steps < 0 ? steps / 10 : s.warmup_steps, steps);
  const int64_t decay = std::max<int64_t>(1, steps - warmup);
  if (warmup > 0 && s.cosine) {
    auto w = std::make_shared<optim::LinearLR>(opt, 1.0 / static_cast<double>(warmup), 1.0, warmup);
    auto c = std::make_shared<optim::CosineAnnealingLR>(opt, decay);
    return std::make_unique<optim::SequentialLR>(opt, std::vector<std::shared_ptr<optim::LRScheduler>>{w, c},
                                                 std::vector<int64_t>{warmup});
  }
  if (warmup > 0) return std::make_unique<optim::LinearLR>(opt, 1.0 / static_cast<double>(warmup), 1.0, warmup);
  if (s.cosine) return std::make_unique<optim::CosineAnnealingLR>(opt, decay);
  return nullptr;
}
}  // namespace

TrainResult train(TrainTask& task, const TrainOptions& options, const std::function<void(const StepRecord&)>& on_step) {
  using clock = std::chrono::steady_clock;
  MT_CHECK(options.save_every >= 0, "save_every must be >= 0, got ", options.save_every);
  // Only rank 0 writes checkpoints; a destination it cannot write fails now, not after the run.
  if (!options.save_dir.empty() && distributed::read_launch_env().rank == 0)
    io::check_checkpoint_destination(options.save_dir);
  nn::Module& model = task.model();
  model.to(options.device);
  optim::AdamW opt(model.parameters(), optim::AdamWOptions().lr(options.lr).weight_decay(options.weight_decay));
  // bf16 has fp32's range: no loss scaling needed, so the scaler is a pass-through there.
  amp::GradScaler scaler(amp::GradScalerOptions()
                             .init_scale(options.init_scale)
                             .enabled(options.precision == Precision::Fp16));
  const std::unique_ptr<optim::LRScheduler> scheduler = make_scheduler(opt, options.constant_lr ? LrSchedule{} : task.schedule(), options.steps);
  const bool autocast = options.precision != Precision::Fp32;
  const DType amp_dtype = options.precision == Precision::Bf16 ? kBFloat16 : kFloat16;

  // Data parallel under a launcher: rank 0's parameters everywhere, each rank its share. The
  // process group holds the shares (the launcher's, or the options'), and DDP moves adaptive ones.
  std::unique_ptr<nn::DistributedDataParallel> ddp;
  distributed::RankShares shares;
  if (distributed::read_launch_env().world_size > 1) {
    if (!distributed::is_initialized()) distributed::init_process_group();
    distributed::ProcessGroup& group = distributed::default_group();
    shares = group.rank_shares();
    if (!options.rank_weights.empty()) {
      distributed::check_rank_weights(options.rank_weights, group.world_size(), "rank weights (train's options)");
      shares.weights = options.rank_weights;
      shares.by_memory = false;
    }
    shares.adaptive = shares.adaptive || options.adaptive_rank_weights;
    // The launcher's --rank-batches auto needs each rank's fit found by dry run, which only
    // `mixtrain train` does (before the task exists); refuse rather than split evenly.
    MT_CHECK(!shares.by_memory, "MIXTRAIN_RANK_BATCHES (mixtrain launch --rank-batches auto) is resolved by ",
             "`mixtrain train`; this trainer takes fixed shares: use --rank-weights instead");
    group.set_rank_shares(shares);
    task.set_data_shard(group.rank(), shares.weights_for(group.world_size()));
    ddp = std::make_unique<nn::DistributedDataParallel>(model.shared_from_this());
    ddp->sync_grad_scaler(scaler);
  }

  TrainResult result;
  if (!options.resume_dir.empty()) {
    io::CheckpointParts parts;
    parts.scheduler = scheduler.get();
    parts.data = task.loader();
    const int64_t done = io::load_checkpoint(options.resume_dir, model, opt, scaler, nullptr, parts);
    if (!parts.data) task.skip_batches(done);
    result.first_step = done + 1;
  }
  // One step, from zero_grad to the scheduler, returning values only: with a plan, nothing the
  // step allocates outlives it but optimizer and scaler state.
  struct StepValues {
    double loss = 0, grad_norm = 0;
    bool skipped = false;
    std::vector<int64_t> rank_rows;
  };
  auto run_step = [&]() -> StepValues {
    StepValues v;
    // Adaptive shares move at the end of a backward (DDP's balancer): this step's rows are split
    // by the shares it started with.
    std::vector<double> weights;
    if (ddp) {
      const distributed::RankShares now = ddp->group().rank_shares();
      if (now.changes != shares.changes) task.set_data_shard(ddp->group().rank(), now.weights_for(ddp->group().world_size()));
      shares = now;
      weights = now.weights_for(ddp->group().world_size());
    }
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard guard(options.device.type, amp_dtype, autocast);
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
    scaler.unscale_(opt);
    Tensor grad_norm;
    if (options.clip_norm > 0) grad_norm = nn::utils::clip_grad_norm_(model.parameters(), options.clip_norm);
    const amp::StepOutcome stepped = scaler.step(opt);
    scaler.update();
    if (scheduler) scheduler->step(stepped);  // a skipped step leaves the schedule where it was
    if (ddp) {
      global_loss_work.wait();
      v.loss = global_loss.item<double>();
    } else {
      v.loss = loss.item<double>();  // waits for the device, after the update is queued
    }
    if (grad_norm.defined()) v.grad_norm = grad_norm.item<double>();
    v.skipped = !stepped;          // decided on the device; known by now
    // Planned: the gradients die inside the step, so they come from the arena too. The next
    // step's zero_grad would drop them anyway; nothing reads them in between.
    if (options.memory_plan) opt.zero_grad();
    return v;
  };

  std::unique_ptr<memory::PlanCache> plans;
  if (options.memory_plan) plans = std::make_unique<memory::PlanCache>(options.device);
  const memory::Stats plan_stats0 = memory::stats(options.device);
  memory::reset_peak_stats(options.device);
  const auto start = clock::now();
  for (int64_t step = result.first_step; step <= options.steps; ++step) {
    const auto t0 = clock::now();
    StepRecord rec;
    rec.step = step;
    rec.scale = scaler.get_scale();
    rec.lr = opt.param_groups()[0].options().get_lr();
    StepValues v;
    if (plans) {
      std::vector<int64_t> key = task.prepare_batch();
      // The batch's shapes are the global batch's: a new split changes this rank's share of it.
      if (shares.adaptive) key.push_back(ddp->group().rank_shares().changes);
      v = plans->run(key, run_step);
    } else {
      v = run_step();
    }
    rec.loss = v.loss;
    rec.grad_norm = v.grad_norm;
    rec.skipped = v.skipped;
    rec.rank_rows = v.rank_rows;
    rec.seconds = std::chrono::duration<double>(clock::now() - t0).count();
    result.skipped_steps += rec.skipped;
    result.records.push_back(rec);
    if (on_step) on_step(rec);  // the log and the progress line get the step that stops the run too
    // A non-finite loss that loss scaling cannot recover from (fp32/bf16, or fp16 with the scale
    // at its floor) ends the run with an Error naming the step, instead of training on NaN.
    scaler.check_loss(rec.loss, step);
    const bool last = step == options.steps;
    if (!options.save_dir.empty() && (last || (options.save_every > 0 && step % options.save_every == 0))) {
      // Data parallel: the replicas are identical; rank 0 writes once every rank is done with
      // the step, and nobody goes on (or reads it) before the file is complete.
      if (ddp) ddp->group().barrier();
      if (distributed::rank() == 0) io::save_checkpoint(options.save_dir, model, opt, scaler, step, nlohmann::json::object(),
                                                         {scheduler.get(), task.loader()});
      if (ddp) ddp->group().barrier();
    }
  }
  result.seconds = std::chrono::duration<double>(clock::now() - start).count();
  result.memory = memory::stats(options.device);
  if (plans) {
    result.memory_plans = static_cast<int64_t>(plans->size());
    result.plan_hits = result.memory.num_plan_hits - plan_stats0.num_plan_hits;
    result.plan_misses = result.memory.num_plan_misses - plan_stats0.num_plan_misses;
  }
  return result;
}

}  // namespace mixtrain::train
