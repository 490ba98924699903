#pragma once
// distributed::ZeroRedundancyOptimizer: ZeRO stage 1 on top of nn::DistributedDataParallel. Every
// rank keeps the whole model and its gradients, but the optimizer's state (Adam's moments, and
// the fp32 master weights of half parameters) only for its own shard: each of DDP's flat gradient
// buckets is padded to a multiple of the world size and cut into equal chunks, element by
// element, one per rank. Backward reduce-scatters the buckets (each rank receives the sum of its
// chunk) instead of all-reducing them; the optimizer updates the rank's chunk of the parameters;
// the chunks are then all-gathered into every replica. Same bytes on the wire as DDP's ring
// all-reduce; optimizer state and master weights divided by the world size. Uneven batches
// (rank weights, DDP's scale_loss) work unchanged. docs/DISTRIBUTED.md, "ZeRO-1".
//
//   nn::DistributedDataParallel ddp(model);
//   distributed::ZeroRedundancyOptimizer zero(ddp, [](std::vector<optim::ParamGroup> groups) {
//     return std::make_unique<optim::AdamW>(std::move(groups), optim::AdamWOptions().lr(1e-3));
//   });
//   ddp.sync_grad_scaler(scaler);           // every rank skips or steps together
//   zero.zero_grad();
//   scaler.scale(ddp.scale_loss(loss_fn(ddp.forward(x), y))).backward();   // reduce-scatters
//   scaler.unscale_(zero.optimizer());
//   zero.clip_grad_norm_(1.0);              // the norm of the whole gradient, across ranks
//   zero.step(scaler);                      // this rank's shard, then the all-gather
//   scaler.update();
//
// After backward a parameter's grad holds the reduced gradient only on this rank's chunk; clip
// and read norms through this class. After step() the buckets hold the gathered parameters and
// the parameters have no grads.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "mixtrain/core/tensor.h"
#include "mixtrain/optim/optimizer.h"

namespace mixtrain {
namespace nn {
class Module;
class DistributedDataParallel;
class DistributedDataParallelOptions;
}  // namespace nn
namespace amp {
class GradScaler;
class StepOutcome;
}  // namespace amp
namespace io {
struct OptimizerState;
struct OptimizerPieces;
struct ShardLayout;
}  // namespace io
}  // namespace mixtrain

namespace mixtrain::distributed {

class ProcessGroup;

// One piece of a rank's shard: the elements [offset, offset + numel) of parameter `param` (its
// index among the DDP's trained parameters, in registration order), in bucket `bucket` at
// `bucket_offset`.
struct ZeroPiece {
  size_t param = 0;
  size_t bucket = 0;
  int64_t offset = 0, numel = 0, bucket_offset = 0;
};
// Rank `rank`'s pieces when `params` (registration order) are bucketed as DDP buckets them with
// `options` and every bucket is split into `world` equal chunks. The dry run uses it to predict a
// rank's step without a group.
std::vector<ZeroPiece> zero_pieces(const std::vector<Tensor>& params, const nn::DistributedDataParallelOptions& options,
                                   int rank, int world);
// The piece's elements of t (its parameter, or a tensor of that parameter's shape, contiguous):
// a flat view.
Tensor piece_of(const Tensor& t, const ZeroPiece& piece);

// Refers to the DDP it shards (its reducer and group): the DDP must outlive it.
class ZeroRedundancyOptimizer {
 public:
  // Builds the optimizer over this rank's shard (one group with its defaults).
  using OptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroup>)>;
  ZeroRedundancyOptimizer(nn::DistributedDataParallel& ddp, OptimizerFactory make_optimizer);
  ~ZeroRedundancyOptimizer();
  ZeroRedundancyOptimizer(const ZeroRedundancyOptimizer&) = delete;
  ZeroRedundancyOptimizer& operator=(const ZeroRedundancyOptimizer&) = delete;

  // The optimizer of this rank's shard: give it to GradScaler::unscale_ and to LR schedulers.
  optim::Optimizer& optimizer() { return *optimizer_; }
  const std::vector<ZeroPiece>& pieces() const { return pieces_; }
  int64_t shard_numel() const;  // elements of the parameters this rank updates
  int rank() const;             // in the DDP's group
  ProcessGroup& group();        // the DDP's

  // Drops the model's gradients (the optimizer's zero_grad would only drop the shard's).
  void zero_grad();
  // The total norm of every rank's gradients (each rank's shard, combined by an all-reduce), and
  // the shard scaled by max_norm / (norm + 1e-6) when that is below 1, as nn::utils::
  // clip_grad_norm_ does on one process. After GradScaler::unscale_: the unscaled gradients.
  Tensor clip_grad_norm_(double max_norm, double norm_type = 2.0);
  // The shard's update (through the scaler, which may skip it: the StepOutcome says), then every
  // rank's chunk of the parameters to every rank.
  amp::StepOutcome step(amp::GradScaler& scaler);
  void step();

  // After the DDP moved to another group (an elastic job's next generation): the chunks and the
  // optimizer are laid out for its world size anew; the state starts empty (load a checkpoint).
  void reshard();

  // The optimizer state of the whole model, as the same optimizer over every parameter would
  // hold it (io::save_checkpoint writes it: the checkpoint any run loads), gathered bucket by
  // bucket into rank `to` (the others get an empty state). Collective. Rank `to` holds the whole
  // state meanwhile.
  io::OptimizerState consolidate_state(int to = 0);
  // Takes this rank's shard of a whole-model state (io::load_checkpoint's OptimizerState form): a
  // checkpoint saved at any world size, with or without ZeRO. check_ throws what load_ would
  // refuse, changing nothing (give it to load_checkpoint as its check, with stand-in tensors).
  void check_consolidated_state(const io::OptimizerState& state) const;
  void load_consolidated_state(const io::OptimizerState& state);
  // The whole model's optimizer state_dict (hyper-parameters, step counts; no tensors) as
  // consolidate_state gives it, from this rank's shard alone: no collective.
  nlohmann::json consolidated_state_dict() const;

  // Sharded checkpoints (save_sharded_checkpoint): every rank's pieces in the group, for the
  // index; and this rank's optimizer as io::load_checkpoint fills its pieces of a checkpoint
  // (sharded at any world size, or whole), checking as check_consolidated_state does.
  io::ShardLayout shard_layout() const;
  io::OptimizerPieces state_pieces();

 private:
  std::vector<ZeroPiece> pieces_of_rank(int rank) const;
  void build();
  void set_shard_grads();
  void gather_parameters();
  nn::DistributedDataParallel& ddp_;
  OptimizerFactory make_optimizer_;
  std::vector<Tensor> params_;       // the DDP's trained parameters, registration order
  std::vector<ZeroPiece> pieces_;
  std::vector<Tensor> shard_params_;  // per piece: a view of its elements of the parameter
  std::unique_ptr<optim::Optimizer> optimizer_;
};

}  // namespace mixtrain::distributed

namespace mixtrain::io {
struct CheckpointParts;
}

namespace mixtrain::distributed {

// Checkpoints of a ZeRO run in io::save_checkpoint's format, holding the optimizer state of the
// whole model (as the same optimizer over every parameter would), so that any run loads them: a
// ZeRO run at another world size, DDP, one process. Collective: every rank calls it; the state is
// gathered into rank 0, which writes (atomically, as io does) and holds the whole state meanwhile.
void save_checkpoint(const std::string& dir, const nn::Module& model, ZeroRedundancyOptimizer& zero,
                     const amp::GradScaler& scaler, int64_t step, const nlohmann::json& extra,
                     const io::CheckpointParts& parts);
// The same checkpoint with the optimizer state sharded, as DeepSpeed and torch.distributed.checkpoint
// save it: every rank writes its own shard ("optimizer-rank-00001-of-00004.safetensors", its
// optimizer's state tensors only) into the save's staging directory, then rank 0 writes the model
// and, last, the index (trainer.json: the world size, every rank's pieces of the parameters, the
// dtypes, each shard's size and CRC-32) and swaps the directory in whole. Nothing is gathered, and
// no rank holds more than its shard. The ranks must share the directory (one host, or a shared
// filesystem); the Error says so otherwise. Collective; every rank throws if any rank failed, and
// the previous checkpoint is then left as it was.
void save_sharded_checkpoint(const std::string& dir, const nn::Module& model, ZeroRedundancyOptimizer& zero,
                             const amp::GradScaler& scaler, int64_t step, const nlohmann::json& extra,
                             const io::CheckpointParts& parts);
// Every rank reads the checkpoint (gathered or sharded, written by any run with this optimizer
// type, one parameter group) and keeps its shard: from a sharded one saved at this world size,
// its own shard file only; at another, the shard files holding its elements. Everything is
// checked before anything changes, and the ranks agree before any applies: a checkpoint that any
// rank refuses (a missing, truncated or corrupt shard) is refused by all, naming the file.
// Returns the step.
int64_t load_checkpoint(const std::string& dir, nn::Module& model, ZeroRedundancyOptimizer& zero,
                        amp::GradScaler& scaler, nlohmann::json* extra, const io::CheckpointParts& parts);

}  // namespace mixtrain::distributed
