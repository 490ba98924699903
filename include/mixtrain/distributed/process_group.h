#pragma once
// mixtrain::distributed: a process group over Gloo (CPU tensors) and NCCL (CUDA tensors), the
// collectives data-parallel training needs, and the launch contract read from the environment
// (torchrun's RANK/WORLD_SIZE/..., Open MPI's and Slurm's). docs/DISTRIBUTED.md describes it.
// Every collective runs on the group's communication thread, in call order on every rank, and
// is bounded by the group's timeout: a rank that died or stopped calling makes the others throw
// a mixtrain::Error naming the collective, the ranks and the timeout.
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mixtrain/base/arg.h"
#include "mixtrain/core/tensor.h"
#include "mixtrain/distributed/rank_shares.h"

namespace mixtrain::distributed {

enum class ReduceOp { Sum, Avg, Max, Min };
const char* reduce_op_name(ReduceOp op);

// Where this process sits in the job, as the launcher described it.
struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr;  // empty when not given
  int master_port = 0;
  std::string source;  // "torchrun", "openmpi", "slurm" or "none"
  // How often the launcher restarted the job ($MIXTRAIN_RESTART_COUNT, torchrun's
  // $TORCHELASTIC_RESTART_COUNT): a trainer restarted after a failure resumes from its checkpoint.
  int restart_count = 0;
  // `mixtrain launch --elastic` ($MIXTRAIN_ELASTIC=1): survivors of a failed rank go on without a
  // restart (distributed::ElasticAgent, elastic.h). `--join` ($MIXTRAIN_ELASTIC_JOIN=1): this
  // process joins a running elastic job; its RANK and WORLD_SIZE are placeholders until admitted.
  bool elastic = false;
  bool elastic_join = false;
};
// The most ranks a job may have: the rendezvous store answers a check of every rank's key in one
// frame of at most this many keys, and a rendezvous of this size ends within its timeout.
constexpr int kMaxWorldSize = 1 << 16;
// Reads RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE/MASTER_ADDR/MASTER_PORT, else Open MPI's
// OMPI_COMM_WORLD_*, else Slurm's SLURM_PROCID/NTASKS/LOCALID; none set: rank 0 of 1. Malformed
// or inconsistent values (rank outside [0, world size), a world size above kMaxWorldSize) are an
// Error naming the variable.
LaunchEnv read_launch_env();

class ProcessGroupOptions {
  // -1: from the environment. Given values must agree with the environment when it has them.
  MT_ARG(int, rank) = -1;
  MT_ARG(int, world_size) = -1;
  // Rendezvous: "tcp://host:port" (rank 0 serves the store there; the others connect), "file:/dir"
  // (one host or a shared file system) or "redis://host:port". Empty: $MIXTRAIN_STORE, else
  // tcp://MASTER_ADDR:MASTER_PORT (as torchrun's workers do), or at world size 1 without
  // MASTER_PORT a directory of the process's own, removed with the group. The TCP store ends with
  // rank 0's group; in the others each rank removes its keys once all ranks have connected.
  MT_ARG(std::string, store);
  // Bounds the whole rendezvous and every collective; default 5 minutes ($MIXTRAIN_TIMEOUT_S
  // overrides).
  MT_ARG(std::chrono::milliseconds, timeout) = std::chrono::minutes(5);
  // Address the Gloo TCP transport binds to and advertises (empty: $MIXTRAIN_GLOO_HOST, else the
  // interface $GLOO_SOCKET_IFNAME, else this host's address on the route to MASTER_ADDR, else
  // 127.0.0.1 when the job is on one host, else this host's name).
  MT_ARG(std::string, hostname);
  // Before each collective the ranks exchange what they are about to call (operation, dtype,
  // shape, root) and stop with an Error naming both calls when they differ, instead of Gloo
  // failing (or reducing mismatched bytes) on them. Costs one small all-gather per collective;
  // DDP's gradient buckets skip it (their layout is checked once, at construction).
  // $MIXTRAIN_CHECK_COLLECTIVES=0/1 overrides; every rank must agree (checked at rendezvous).
  MT_ARG(bool, check_collectives) = true;
};

// A pending collective. wait() rethrows its error (a mixtrain::Error); waiting twice is fine.
class Work {
 public:
  struct State;
  Work() = default;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}
  void wait() const;
  bool is_completed() const;
  bool valid() const { return state_ != nullptr; }

 private:
  std::shared_ptr<State> state_;
};

class CommThread;
class KeyValueStore;
struct UncheckedCollectives;
struct GroupInternals;

class ProcessGroup {
 public:
  class Backend;
  // rank_addresses: the address each rank advertised (error messages name the ranks behind one).
  ProcessGroup(const LaunchEnv& env, std::chrono::milliseconds timeout, std::unique_ptr<Backend> cpu,
               std::shared_ptr<KeyValueStore> store, bool check_collectives = false,
               std::vector<std::string> rank_addresses = {});
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  int local_rank() const { return env_.local_rank; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout);

  // How the ranks share each global batch: from the launcher (launch_rank_shares) for a group
  // made by init_process_group/new_process_group, else even (an ElasticAgent's groups: set them to
  // the members' weights, MembershipChange::weights). DistributedSampler reads them at
  // every batch and DistributedDataParallel moves adaptive ones, so set them before training, the
  // same on every rank. set_rank_shares checks one positive weight per rank (or none: even).
  RankShares rank_shares() const;
  void set_rank_shares(RankShares shares);

  // In place on a dense tensor (CPU: float32/64, float16, bfloat16, int32, int64). Avg divides
  // the sum by the world size (integers: truncating).
  void all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum);
  Work all_reduce_async(const Tensor& tensor, ReduceOp op = ReduceOp::Sum);
  // Root's values into `tensor` on every rank (same shape and dtype everywhere).
  void broadcast(Tensor& tensor, int root = 0);
  Work broadcast_async(const Tensor& tensor, int root = 0);
  // Every rank's tensor (same shape and dtype everywhere), in rank order.
  std::vector<Tensor> all_gather(const Tensor& tensor);
  // `out` is filled with world_size tensors once the work completes.
  Work all_gather_async(const Tensor& tensor, std::shared_ptr<std::vector<Tensor>> out);
  void barrier();
  Work barrier_async();
  // ZeRO's collectives (PyTorch's names), on dense tensors of one dtype and device. reduce_scatter:
  // `input` holds world_size() equal chunks; `output` (one chunk's size, and may be this rank's
  // chunk of `input` itself) receives the reduction of every rank's chunk rank(). `input` is
  // scratch afterwards. all_gather_into_tensor: `output` (world_size() chunks) receives every
  // rank's `input` in rank order; `input` may be this rank's chunk of `output` (in place). Each
  // moves (world_size - 1) / world_size of `output`'s (reduce-scatter: `input`'s) bytes per rank,
  // half of a ring all-reduce's.
  void reduce_scatter_tensor(Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::Sum);
  Work reduce_scatter_tensor_async(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::Sum);
  void all_gather_into_tensor(Tensor& output, const Tensor& input);
  Work all_gather_into_tensor_async(const Tensor& output, const Tensor& input);

  // False once a collective failed (a peer died, timed out or called something else): the group
  // refuses further calls. An elastic trainer then builds a group for the ranks left.
  bool healthy() const { return failure().empty(); }
  // The first failure's message, naming the collective ("" while healthy).
  std::string failure() const;
  // Marks the group failed (reason), fails what is queued without running it and closes the
  // transport's connections, so that peers blocked on this rank fail at once instead of at their
  // timeout. Waits for a collective already running (bounded by the timeout). Idempotent.
  void abort(const std::string& reason);

 private:
  friend struct UncheckedCollectives;  // DDP's buckets (src/distributed/internal.h)
  friend struct GroupInternals;        // the elastic agent's groups
  Backend& backend_for(const Tensor& t, const char* op);
  // signature: what this rank calls, compared across ranks first when checking (empty: no check).
  Work submit(std::string what, std::vector<int64_t> signature, std::function<void()> fn);
  Work all_reduce_impl(const Tensor& tensor, ReduceOp op, bool check);
  Work broadcast_impl(const Tensor& tensor, int root, bool check);
  Work reduce_scatter_impl(const Tensor& output, const Tensor& input, ReduceOp op, bool check);
  Work all_gather_into_impl(const Tensor& output, const Tensor& input, bool check);
  std::string ranks_behind(const std::string& message) const;
  LaunchEnv env_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<KeyValueStore> store_;  // keeps the rendezvous store alive for the NCCL id exchange
  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<Backend> cuda_;  // created on the first CUDA tensor
  std::unique_ptr<CommThread> comm_;
  struct Failure;
  std::shared_ptr<Failure> failure_;  // set by the first failed collective; later calls refuse
  bool check_collectives_ = false;
  std::vector<std::string> rank_addresses_;
  std::string cuda_refusal_;  // non-empty: CUDA tensors are refused with this reason (elastic groups)
  mutable std::mutex shares_mutex_;
  RankShares shares_;
};

// Whether this build has a CPU backend (Gloo); when not, the reason and how to get one.
bool gloo_available();
bool nccl_available();
std::string unavailable_reason();

// Creates the process group (rendezvous with every rank) and makes it the default one.
std::shared_ptr<ProcessGroup> init_process_group(const ProcessGroupOptions& options = ProcessGroupOptions());
// A group without touching the default (tests, several groups in one process).
std::shared_ptr<ProcessGroup> new_process_group(const ProcessGroupOptions& options = ProcessGroupOptions());
bool is_initialized();
ProcessGroup& default_group();  // Error when init_process_group was not called
void destroy_process_group();
// Default group's rank and size; 0 and 1 when no group exists (single-process code runs as is).
int rank();
int world_size();

}  // namespace mixtrain::distributed
