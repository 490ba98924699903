#pragma once
// DistributedDataParallel's reducer: the gradient buckets, the post-accumulate hooks that launch
// a bucket's all-reduce once its gradients are final, and the end-of-backward wait.
#include <functional>
#include <string>
#include <vector>

#include "mixtrain/distributed/ddp.h"

namespace mixtrain::nn {

// DDP's buckets for `params` (registration order): each a list of parameter indices in reduction
// order (ZeroRedundancyOptimizer's chunks follow it too).
std::vector<std::vector<size_t>> ddp_bucket_layout(const std::vector<Tensor>& params,
                                                   const DistributedDataParallelOptions& options);

struct DistributedDataParallel::Reducer {
  struct Bucket {
    std::vector<size_t> params;  // indices into Reducer::params, reduction order
    std::vector<int64_t> offsets;
    Tensor flat;  // the gradients' storage: each parameter's grad is a view into it
    Tensor comm;  // the compressed copy on the wire (compression only)
    size_t pending = 0;
    bool launched = false;
    distributed::Work work;
  };

  Reducer(DistributedDataParallel& ddp, std::vector<std::pair<std::string, Tensor>> named_params);
  ~Reducer();

  // At forward: Error if the last backward left a bucket unreduced (a parameter without
  // gradient); otherwise a fresh round of readiness.
  void prepare();
  // Marks parameters not reachable from `output` ready (find_unused_parameters).
  void mark_unused(const Tensor& output);
  void mark_ready(size_t param);
  // join(): the collectives of one backward with this rank contributing zeros.
  void shadow_backward();
  // Forgets a backward that the old group's failure interrupted (set_process_group).
  void reset();
  // ZeRO: each bucket padded to a multiple of `world` elements and reduce-scattered, so that this
  // rank's chunk [rank * chunk, (rank + 1) * chunk) holds the reduced gradients (the rest is
  // scratch). The buckets are laid out again (the parameters' grads are dropped). world 0: back
  // to all-reduce.
  void shard(int world, int rank);
  int64_t chunk_numel(size_t bucket) const { return shard_world > 0 ? buckets[bucket].flat.numel() / shard_world : 0; }

  int shard_world = 0, shard_rank = 0;
  // Called at the end of each reducing backward, once every bucket is reduced (ZeRO hands the
  // reduced chunks to its optimizer there).
  std::function<void()> after_reduce;

  DistributedDataParallel& ddp;
  std::vector<Tensor> params;
  std::vector<std::string> names;
  std::vector<Tensor> views;  // per parameter: its slice of its bucket
  std::vector<Bucket> buckets;
  std::vector<size_t> bucket_of;
  std::vector<uint64_t> hook_ids;
  std::vector<bool> ready;
  size_t next_launch = 0;
  bool active = false;  // a backward started reducing and has not finished

 private:
  void build_buckets();
  void allocate_buckets();
  // The parameter's gradient, times this rank's weight, into its bucket view, which becomes
  // the parameter's grad.
  void move_into_view(size_t param);
  void launch(Bucket& b);
  void finish();
  std::vector<std::string> unready_names() const;
};

}  // namespace mixtrain::nn
