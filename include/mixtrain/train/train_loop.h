#pragma once
// The training loop: autocast around the forward pass, dynamic loss scaling, gradient clipping
// after unscaling, AdamW, a learning-rate schedule, checkpoints and resume, and data parallelism
// under a launcher (DDP, each rank its share of every batch as the process group's shares say).
// A model plugs in as a TrainTask that builds its loss on the next batch. The example trainers
// and `mixtrain train` run on it (docs/TRAINERS.md).
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "mixtrain/amp/autocast.h"
#include "mixtrain/amp/fp8.h"
#include "mixtrain/base/device.h"
#include "mixtrain/core/tensor.h"
#include "mixtrain/data/dataloader.h"
#include "mixtrain/distributed/process_group.h"
#include "mixtrain/memory/allocator.h"
#include "mixtrain/nn/module.h"

namespace mixtrain::train {

// Fp8: nn::Linear layers in FP8 (amp::Fp8Scaling, the recipe of TrainOptions), bf16 elsewhere.
enum class Precision { Fp32, Fp16, Bf16, Fp8 };
Precision parse_precision(const std::string& name);  // "fp32", "fp16", "bf16", "fp8"
const char* precision_name(Precision p);

// The forward pass's scope for a precision: autocast to fp16 or bf16 (off for fp32), or FP8
// autocast (amp::Fp8AutocastGuard: the Linear layers with FP8 state in FP8, bf16 elsewhere).
class ForwardScope {
 public:
  ForwardScope(DeviceType device, Precision p, const amp::Fp8Recipe& recipe = amp::Fp8Recipe());

 private:
  std::optional<amp::AutocastGuard> autocast_;
  std::optional<amp::Fp8AutocastGuard> fp8_;
};
// The model's FP8 scaling for Precision::Fp8 (its Linear layers get their state), else nullptr.
std::unique_ptr<amp::Fp8Scaling> make_fp8_scaling(nn::Module& model, Precision p, const amp::Fp8Recipe& recipe);

// CUDA when a device is present, else the CPU: the trainers' default.
Device default_device();
// Throws naming the device (and this rank's LOCAL_RANK) unless a CUDA device exists here.
void check_device_available(const Device& d, const std::string& name);
// "cpu" or "cuda" (or "cuda:N"); "cuda" without a usable device is an Error that says so. Under a
// launcher with several ranks, "cuda" without an index is the rank's own GPU (rank_cuda_index).
Device parse_device(const std::string& name);
// The GPU index "cuda" means for a process of `env`: its LOCAL_RANK when several ranks run (the
// GPU its NCCL communicator binds, so each rank trains on its own device), else 0.
int rank_cuda_index(const distributed::LaunchEnv& env);

// A rank's slice of every batch in data-parallel training: the batch's rows split by the ranks'
// weights (distributed::DistributedSampler::split), this rank's part in rank order.
struct DataShard {
  int rank = 0;
  std::vector<double> weights;  // empty: not sharded, rows() returns the batch
  Tensor rows(const Tensor& batch) const;
};

// A learning-rate schedule over a run: linear warm-up from lr / warmup_steps to lr over the first
// warmup_steps steps (LinearLR), then, with cosine, cosine decay to 0 over the remaining steps
// (CosineAnnealingLR; the two chained by SequentialLR). Steps the GradScaler skips do not advance it.
struct LrSchedule {
  int64_t warmup_steps = 0;
  bool cosine = false;
};

// What a model brings to the loop.
class TrainTask {
 public:
  virtual ~TrainTask() = default;
  virtual nn::Module& model() = 0;
  // Draws the next training batch (on the model's device) and returns the scalar loss. The loop
  // calls it inside the autocast scope.
  virtual Tensor next_loss() = 0;
  // Advances the data stream by n batches without computing anything (resume from a checkpoint
  // saved without the loader's position).
  virtual void skip_batches(int64_t n) = 0;
  // Moves the data stream to where it stands after n batches from the start, forward or back, so
  // that the next next_loss draws the batch of step n + 1: elastic training redoes an interrupted
  // step on its batch, and a joiner starts where the job is. The default refuses (such a task
  // cannot train with --elastic).
  virtual void seek_batches(int64_t n);
  // The training data loader, when the task has one: its position is saved in checkpoints.
  virtual data::DataLoader* loader() { return nullptr; }
  // The learning-rate schedule the model trains with (none: a constant rate).
  virtual LrSchedule schedule() const { return {}; }
  // For reports: one line about the model and data, samples per step, and an evaluation after
  // training (e.g. "test accuracy 0.86"; empty when the task has none).
  virtual std::string describe() const { return ""; }
  virtual int64_t batch_size() const { return 0; }
  virtual std::string evaluate() { return ""; }
  // Data-parallel training: from now on next_loss computes only this rank's share of each batch
  // (the batch split by the ranks' weights, the rank's slice in rank order).
  void set_data_shard(int rank, const std::vector<double>& weights) { shard_ = {rank, weights}; }
  // Rows of the batch the last next_loss computed on (this rank's share when sharded; 0 when
  // next_loss never called take_shard).
  int64_t last_batch_rows() const { return last_rows_; }
  // Rows of the whole batch that every rank drew for that step (the global batch).
  int64_t last_global_rows() const { return last_global_rows_; }
  // Planned training (TrainOptions::memory_plan) keys each step's plan by its batch's shapes, so
  // it draws the batch before the step: prepare_batch draws it and returns the key, and the next
  // next_loss computes on that batch. The default keys every step alike: a batch of another
  // shape then misses its plan and runs unplanned (counted, still correct).
  virtual std::vector<int64_t> prepare_batch() { return {}; }

 protected:
  // seek_batches of a task that draws from `loader` (whose state before its first batch is
  // `start`), or, without one, counts its batches in `next`.
  static void seek_stream(int64_t n, data::DataLoader* loader, const nlohmann::json& start, size_t& next);

  // The tensors' shapes one after another, each followed by -1: a plan key.
  static std::vector<int64_t> shapes_key(std::initializer_list<Tensor> tensors);

  // The trainers' loader settings: one background worker collating batches onto `device`, into
  // pinned memory when that is a GPU, so the upload is queued off the step's path.
  static data::DataLoaderOptions training_loader_options(int64_t batch_size, Device device);

  // next_loss passes its batch's tensors through this: each becomes this rank's rows of the batch
  // every rank drew (all of them when not sharded), and the first one's rows count as the batch's.
  template <class... More>
  void take_shard(Tensor& first, More&... more) {
    last_global_rows_ = first.size(0);
    first = shard_.rows(first);
    ((more = shard_.rows(more)), ...);
    last_rows_ = first.size(0);
  }

 private:
  DataShard shard_;
  int64_t last_rows_ = 0, last_global_rows_ = 0;
};

// The task built again for planning (train/predict.h): `batch_size` samples per step (0: the
// task's default) on `device` (meta for a prediction, where no value is ever read).
using TaskFactory = std::function<std::unique_ptr<TrainTask>(int64_t batch_size, Device device)>;

// Under a launcher (WORLD_SIZE > 1 in the environment: `mixtrain launch`, torchrun, mpirun,
// Slurm) train() joins the process group, wraps the model in nn::DistributedDataParallel and has
// each rank compute its share of every batch (the group's shares: even, or the launcher's
// --rank-weights, which DDP moves when adaptive); batch sizes stay global, losses reported are
// the global batch's, and only rank 0 saves checkpoints.
struct TrainOptions {
  Precision precision = Precision::Fp16;
  amp::Fp8Recipe fp8_recipe;   // for Precision::Fp8: delayed scaling, HYBRID, history 1024, max
  Device device = Device::cpu();
  int64_t steps = 100;
  double lr = 1e-3;
  double weight_decay = 0.0;
  double clip_norm = 1.0;      // <= 0: no clipping
  double init_scale = 65536.0;
  std::string save_dir;        // checkpoint here at the end (and every save_every steps)
  int64_t save_every = 0;
  std::string resume_dir;      // start from this checkpoint
  // Train at the constant rate lr whatever the task's schedule (mixtrain bench: the PyTorch
  // reference loop it is compared with has no schedule).
  bool constant_lr = false;
  // Serve each step's in-step buffers from a static plan (memory/plan_cache.h) keyed by the
  // batch's shapes: the first step of a shape is recorded, later ones replay its arena. Losses,
  // gradients and parameters are those of the unplanned loop bit for bit.
  bool memory_plan = false;
  // Data parallel: each rank's share of every batch (one positive weight per rank), overriding
  // the launcher's (the process group's rank_shares). `mixtrain train` fills it for
  // $MIXTRAIN_RANK_BATCHES=auto (each rank's largest fitting batch, docs/DISTRIBUTED.md); empty:
  // the group's.
  std::vector<double> rank_weights;
  // How to build the task again on meta at other batch sizes: with it, train() resolves the
  // launcher's --rank-batches auto (MIXTRAIN_RANK_BATCHES=auto) itself when rank_weights is empty,
  // each rank's share the largest whose step fits its memory (train::rank_weights_by_memory).
  TaskFactory planning_task;
  // Data parallel: start from rank_weights (or the group's) and have DDP move each rank's share
  // toward equal compute times as the steps go (distributed::RankBalancer); the launcher's
  // --rank-weights adaptive sets it too. The steps stay those of one process over the global
  // batch, whatever the split.
  bool adaptive_rank_weights = false;
  // Data parallel: 1 shards AdamW's state across the ranks (distributed::ZeroRedundancyOptimizer,
  // ZeRO-1); 0: every rank holds all of it.
  int zero_stage = 0;
  // With zero_stage 1: checkpoints with each rank's optimizer shard in a file of its own, written
  // in parallel (distributed::save_sharded_checkpoint; the ranks must share save_dir's
  // filesystem); false: gathered into rank 0's one file. Either loads at any world size.
  bool checkpoint_sharded = false;
};

struct StepRecord {
  int64_t step = 0;      // 1-based
  double lr = 0;         // learning rate of this step
  double loss = 0;       // unscaled training loss
  double scale = 1;      // loss scale used for this step
  bool skipped = false;  // the scaler skipped the optimizer step (inf/NaN gradients)
  double grad_norm = 0;  // total gradient norm after unscaling
  double seconds = 0;    // wall time of the step
  std::vector<int64_t> rank_rows;  // data parallel: every rank's rows of this step's batch
  int rank = 0;          // data parallel: this process's rank when the step ended (rank 0 reports)
};

// A step's record as JSON, its one encoding: what `mixtrain train --log` writes per line (with the
// memory figures added) and what an elastic member sends with its state. Non-finite numbers are
// null; from_json reads them back as NaN and throws an Error naming the record when it is malformed.
nlohmann::json step_record_json(const StepRecord& r);
StepRecord step_record_from_json(const nlohmann::json& j);

struct TrainResult {
  std::vector<StepRecord> records;
  int64_t first_step = 1;
  // The checkpoint the run started from: TrainOptions::resume_dir, or save_dir when its launcher
  // restarted it after a failure (--max-restarts: $MIXTRAIN_RESTART_COUNT > 0) and it holds one.
  std::string resumed_from;
  int64_t skipped_steps = 0;
  double seconds = 0;
  memory::Stats memory;  // of options.device, peaks over the run
  // This rank's optimizer state at the end (moments, master weights): a ZeRO-1 rank's shard.
  int64_t optimizer_state_bytes = 0;
  // With memory_plan: plans built (one per batch shape), requests served from their arenas and
  // steps that differed from their plan, over this run.
  int64_t memory_plans = 0, plan_hits = 0, plan_misses = 0;
  // Precision::Fp8: the FP8 layers' statistics of the last step, and the model's Linear layers
  // (those left out by amp::Fp8Scaling's filter ran in bf16).
  std::vector<amp::Fp8LayerStats> fp8_layers;
  int64_t linear_layers = 0;
  // --rank-batches auto resolved by train(): every rank's budget, fit and share, one line.
  std::string rank_shares_report;
};

TrainResult train(TrainTask& task, const TrainOptions& options,
                  const std::function<void(const StepRecord&)>& on_step = {});

// Number of elements over a module's parameters.
int64_t parameter_count(const nn::Module& model);

// train() with a plain progress line every log_every steps (and at the first and last) on `log`:
// "step N  loss L  scale S  (R steps/s)", averaging the losses since the previous line.
TrainResult train_with_log(TrainTask& task, const TrainOptions& options, std::ostream* log, int64_t log_every);

}  // namespace mixtrain::train
