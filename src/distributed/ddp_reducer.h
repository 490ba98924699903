#pragma once
// DistributedDataParallel's reducer: the gradient buckets, the post-accumulate hooks that launch
// a bucket's all-reduce once its gradients are final, and the end-of-backward wait.
#include <string>
#include <vector>

#include "mixtrain/distributed/ddp.h"

namespace mixtrain::nn {

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
  // The parameter's gradient, times this rank's weight, into its bucket view, which becomes
  // the parameter's grad.
  void move_into_view(size_t param);
  void launch(Bucket& b);
  void finish();
  std::vector<std::string> unready_names() const;
};

}  // namespace mixtrain::nn
