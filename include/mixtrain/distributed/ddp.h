#pragma once
// nn::DistributedDataParallel: data-parallel training of one module replicated in every rank of
// a process group. At construction it checks that the ranks hold the same model and broadcasts
// rank 0's parameters and buffers. In backward, gradients land directly in flat buckets (the
// parameters' grads are views into them); each bucket's all-reduce starts on the group's
// communication thread as soon as its last gradient is accumulated, overlapping the rest of
// backward, and backward returns once every bucket is reduced. Each rank's gradient is weighted
// by its share of the global batch, so uneven per-rank batches give the single-process step over
// the whole global batch. When the group's shares are adaptive (mixtrain launch --rank-weights
// adaptive), it times each rank's compute and moves the shares toward equal compute times.
// docs/DISTRIBUTED.md describes it.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mixtrain/base/arg.h"
#include "mixtrain/distributed/process_group.h"
#include "mixtrain/nn/module.h"

namespace mixtrain::amp {
class GradScaler;
class Fp8Scaling;
}
namespace mixtrain::distributed {
class ZeroRedundancyOptimizer;
}
namespace mixtrain::distributed {
class RankBalancer;
}

namespace mixtrain::nn {

class DistributedDataParallelOptions {
  MT_ARG(double, bucket_cap_mb) = 25.0;
  MT_ARG(double, first_bucket_mb) = 1.0;  // small, so communication starts early in backward
  // Parameters that get no gradient in a backward are reduced as zeros instead of an Error (the
  // graph from forward's output is walked to find them).
  MT_ARG(bool, find_unused_parameters) = false;
  // Rank 0's buffers (batch norm statistics) are broadcast at every forward.
  MT_ARG(bool, broadcast_buffers) = true;
  // Float32: buckets are reduced in the gradients' dtype. Float16/BFloat16: a bucket is divided
  // by its share first, cast, reduced and cast back (half the bytes on the wire).
  MT_ARG(DType, compression) = DType::Float32;
  // Weight each rank's gradient by its batch (forward's input.size(0)) over the global batch.
  // Off: plain mean over ranks.
  MT_ARG(bool, weight_by_batch) = true;
  // At construction, compare the ranks' models and broadcast rank 0's parameters and buffers
  // (collectives every rank must call). Off for a rank that joins a running elastic job: the
  // others built theirs long ago, and the elastic agent sends it the state.
  MT_ARG(bool, init_sync) = true;
};

class DistributedDataParallel {
 public:
  // group: the default process group when null.
  explicit DistributedDataParallel(std::shared_ptr<Module> module,
                                   std::shared_ptr<distributed::ProcessGroup> group = nullptr,
                                   const DistributedDataParallelOptions& options = DistributedDataParallelOptions());
  template <class Holder, class = decltype(std::declval<Holder>().ptr())>
  explicit DistributedDataParallel(const Holder& holder, std::shared_ptr<distributed::ProcessGroup> group = nullptr,
                                   const DistributedDataParallelOptions& options = DistributedDataParallelOptions())
      : DistributedDataParallel(std::static_pointer_cast<Module>(holder.ptr()), std::move(group), options) {}
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // The module's forward on this rank's batch (batch size: input.size(0)).
  Tensor forward(const Tensor& input);
  // For modules with other signatures: prepare_forward before the module's own forward (with
  // this rank's batch size, or call set_local_batch later but before backward), after_forward
  // with its output (find_unused_parameters walks the graph from it).
  void prepare_forward(int64_t local_batch = -1);
  void set_local_batch(int64_t local_batch);
  // The same when every rank already knows the global batch (a fixed split of a batch they all
  // drew): no collective. join() pairs its steps with set_local_batch's exchange, so a job whose
  // ranks may join uses the one-argument form.
  void set_local_batch(int64_t local_batch, int64_t global_batch);
  void after_forward(const Tensor& output);

  // This rank's contribution to the global batch's mean loss: `loss` (the mean over this rank's
  // rows) times this step's gradient_weight(), n_r / N. Back-propagate it instead of `loss`
  //     scaler.scale(ddp.scale_loss(loss)).backward();
  // and every activation and weight gradient has the magnitude it has in one process on the
  // global batch (1/N per row, not 1/n_r), so fp16 overflows on the same steps; DDP then only
  // sums. Without it DDP weights the gradients after backward instead (the same step in fp32, up
  // to rounding). Call it after set_local_batch (or prepare_forward/forward), in every backward
  // of a step (no_sync accumulation included) or in none.
  Tensor scale_loss(const Tensor& loss);

  Module& module() { return *module_; }
  std::vector<Tensor> parameters() const { return module_->parameters(); }
  distributed::ProcessGroup& group() { return *group_; }
  // Communicates over `group` from now on (an elastic job's next generation, with other ranks and
  // another world size): the buckets stay, a backward interrupted by the old group's failure is
  // forgotten, and sync_grad_scaler's and sync_fp8's reductions follow. Adaptive shares start again
  // from the new group's rank_shares (set them first). Between steps only.
  void set_process_group(std::shared_ptr<distributed::ProcessGroup> group);

  // While alive, backward accumulates into the grads without communicating (gradient
  // accumulation); the first backward after it reduces the accumulated gradients.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp), prev_(ddp.sync_) { ddp.sync_ = false; }
    ~NoSyncGuard() { ddp_.sync_ = prev_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool prev_;
  };
  NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // Makes the scaler agree on inf/NaN across ranks (MAX of the flags), so every rank skips or
  // steps together even where their gradients could differ.
  void sync_grad_scaler(amp::GradScaler& scaler);
  // Makes every rank's FP8 scales the same: Fp8Scaling::update() reduces the step's amaxes with
  // MAX across ranks before computing them (as TransformerEngine does).
  void sync_fp8(amp::Fp8Scaling& fp8);

  // For a rank out of data: shadows the other ranks' steps (their per-step collectives, with
  // this rank contributing no samples) until every rank has called join(); then the parameters
  // and buffers of the rank that ran the most steps are broadcast so the replicas agree.
  // Returns the number of steps shadowed.
  int64_t join();

  // This step's global batch (sum over ranks) and this rank's weight in it.
  int64_t global_batch() const { return global_batch_; }
  double gradient_weight() const { return weight_; }
  // Seconds this step (since prepare_forward) has spent waiting for the other ranks: the buffer
  // broadcast at forward, and the all-reduces still running once backward's own work was done.
  // On CUDA it also holds the device work queued before the collectives, which the host waits
  // for with them.
  double step_wait_seconds() const { return wait_seconds_; }
  // What this rank's share of the last synchronised step cost it: from prepare_forward to the end
  // of backward, less step_wait_seconds() (0 before the first). On CPU ranks that is the compute
  // a RankBalancer needs; on CUDA the host runs ahead of the device, so it is not.
  double step_compute_seconds() const { return compute_seconds_; }
  int64_t num_buckets() const;
  // Parameter indices (registration order) per bucket, in reduction order.
  std::vector<std::vector<size_t>> bucket_assignment() const;

 private:
  friend class distributed::ZeroRedundancyOptimizer;  // shards the buckets (zero.h)
  struct Reducer;
  void check_models_match();
  void broadcast_state();
  void exchange_batch(int64_t local_batch);
  void set_weight(int64_t local_batch);
  // Adaptive shares: every rank's rows and compute seconds of its last step, all-reduced (each
  // rank fills its own slots) from prepare_forward on, and observed at the end of the next backward.
  void send_step_timing();
  void observe_step_timing();
  void end_of_backward();
  // The balancer for the group's shares (adaptive only), started from its weights.
  void follow_rank_shares();
  // The scaler's and FP8's agreement: MAX in place over group_, whichever group that is by then.
  std::function<void(Tensor&)> max_over_current_group() const;

  std::unique_ptr<distributed::RankBalancer> balancer_;  // adaptive shares only
  Tensor timing_;
  distributed::Work timing_work_;
  std::chrono::steady_clock::time_point step_start_;
  double compute_seconds_ = 0;
  int64_t local_rows_ = 0;
  bool measured_ = false;  // compute_seconds_ and local_rows_ describe a step not yet sent

  std::shared_ptr<Module> module_;
  std::shared_ptr<distributed::ProcessGroup> group_;
  // What the hooks of sync_grad_scaler and sync_fp8 reduce over: group_, also after set_process_group.
  std::shared_ptr<std::shared_ptr<distributed::ProcessGroup>> hook_group_;
  DistributedDataParallelOptions options_;
  std::unique_ptr<Reducer> reducer_;
  bool sync_ = true;
  bool scaler_synced_ = false;
  int64_t fp8_layers_ = -1;  // sync_fp8: the FP8 layers whose amaxes join() must shadow
  bool loss_scaled_ = false;  // this step's loss went through scale_loss: gradients are weighted
  int64_t global_batch_ = 0;
  double weight_ = 1.0;
  double wait_seconds_ = 0;
  int64_t steps_ = 0;
};

}  // namespace mixtrain::nn
