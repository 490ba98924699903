#pragma once
// Internal pieces of mixtrain::distributed shared by the group, the Gloo and NCCL backends and
// the communication thread (the rendezvous store: store.h). Gloo's and NCCL's own types never
// appear here.
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "distributed/store.h"
#include "mixtrain/base/error.h"
#include "mixtrain/distributed/process_group.h"

namespace mixtrain::distributed {

struct Work::State {
  std::string what;  // the collective, for progress lines
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  void finish(std::exception_ptr e);
};

// One thread that runs a group's collectives in call order, so that every rank issues them in
// the same order and the caller's thread (backward) keeps computing meanwhile.
class CommThread {
 public:
  CommThread();
  ~CommThread();  // finishes what is queued
  Work enqueue(std::function<void()> fn, std::string what);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Blocking collectives of one transport, called on the group's communication thread only.
class ProcessGroup::Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual void all_reduce(Tensor& t, ReduceOp op, std::chrono::milliseconds timeout) = 0;
  virtual void broadcast(Tensor& t, int root, std::chrono::milliseconds timeout) = 0;
  // out: world_size tensors shaped like t, already allocated.
  virtual void all_gather(const Tensor& t, std::vector<Tensor>& out, std::chrono::milliseconds timeout) = 0;
  virtual void barrier(std::chrono::milliseconds timeout) = 0;
  // ProcessGroup::reduce_scatter_tensor / all_gather_into_tensor, shapes already checked.
  virtual void reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op, std::chrono::milliseconds timeout) = 0;
  virtual void all_gather_into(const Tensor& input, Tensor& output, std::chrono::milliseconds timeout) = 0;
};

// Where this rank's Gloo transport listens and what its peers connect to.
struct GlooAddress {
  std::string hostname;  // an address of this host (empty with iface)
  std::string iface;     // an interface name (GLOO_SOCKET_IFNAME)
  std::string describe() const { return iface.empty() ? hostname : "interface " + iface; }
};
// Connects the full mesh through the store, within the deadline (gloo_backend.cpp).
std::unique_ptr<ProcessGroup::Backend> make_gloo_backend(KeyValueStore& store, int rank, int world_size,
                                                         const GlooAddress& address, const Deadline& deadline);
// NCCL (nccl_backend.cpp; throws the reason when this build has no CUDA/NCCL).
std::unique_ptr<ProcessGroup::Backend> make_nccl_backend(KeyValueStore& store, const LaunchEnv& env,
                                                         std::chrono::milliseconds timeout);

// The rendezvous store a group of `env` uses: `spec` ("tcp://host:port", "file:/dir", "redis://...",
// empty: from the environment, as init_process_group). `serve`: this process serves a TCP store.
std::shared_ptr<KeyValueStore> open_store(const std::string& spec, const LaunchEnv& env, const Deadline& deadline);
std::string default_store_spec(const LaunchEnv& env);
// Whether ranks are told that the launcher serves the TCP store ($MIXTRAIN_STORE_SERVER=launcher).
bool store_served_by_launcher();
// The rendezvous of every rank of `env` through `store`, then Gloo's mesh: a new group.
std::shared_ptr<ProcessGroup> connect_group(std::shared_ptr<KeyValueStore> store, const LaunchEnv& env,
                                            std::chrono::milliseconds timeout, bool check_collectives,
                                            const std::string& hostname, const Deadline& deadline);
// Settings every group of this process shares: $MIXTRAIN_TIMEOUT_S over the option,
// $MIXTRAIN_CHECK_COLLECTIVES over the option.
std::chrono::milliseconds group_timeout(const ProcessGroupOptions& options);
bool group_checks_collectives(const ProcessGroupOptions& options);

// What only the elastic agent changes on a group.
struct GroupInternals {
  static void refuse_cuda(ProcessGroup& g, std::string reason) { g.cuda_refusal_ = std::move(reason); }
};

// Ranks about to call different collectives (the check of ProcessGroupOptions::check_collectives).
struct CollectiveMismatch : Error {
  using Error::Error;
};

// Collectives whose layout every rank already shares, so the cross-rank check is skipped: DDP's
// gradient buckets and buffer broadcasts (the model was compared across ranks at construction).
struct UncheckedCollectives {
  static Work all_reduce_async(ProcessGroup& g, const Tensor& t, ReduceOp op = ReduceOp::Sum) {
    return g.all_reduce_impl(t, op, false);
  }
  static Work broadcast_async(ProcessGroup& g, const Tensor& t, int root) { return g.broadcast_impl(t, root, false); }
  static Work reduce_scatter_async(ProcessGroup& g, const Tensor& out, const Tensor& in) {
    return g.reduce_scatter_impl(out, in, ReduceOp::Sum, false);
  }
  static Work all_gather_into_async(ProcessGroup& g, const Tensor& out, const Tensor& in) {
    return g.all_gather_into_impl(out, in, false);
  }
};

// "all_reduce(float32 [10]) on rank 0 of 2" style description for error messages.
std::string describe(const char* op, const Tensor* t, int rank, int world_size);
// Sizes in elements of a dense tensor's data; Error naming the op unless dense.
void check_dense(const Tensor& t, const char* op);

}  // namespace mixtrain::distributed
