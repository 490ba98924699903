#pragma once
// Internal pieces of mixtrain::distributed shared by the group, the Gloo and NCCL backends and
// the communication thread. Gloo's and NCCL's own types never appear here.
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mixtrain/core/error.h"
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

// One operation's time limit: every wait inside it ends at the same point, so a rendezvous of
// several phases is bounded by its timeout in all, and messages can give the real time spent.
struct Deadline {
  explicit Deadline(std::chrono::milliseconds timeout);
  std::chrono::milliseconds timeout;
  std::chrono::steady_clock::time_point start, end;
  std::chrono::milliseconds left() const;  // 0 once passed
  bool passed() const { return std::chrono::steady_clock::now() >= end; }
  double elapsed_seconds() const;
  // "waited 3.01 s (timeout 3 s)"
  std::string waited() const;
};

// Seconds between the progress lines of a long wait ($MIXTRAIN_WAIT_REPORT_S, default 10).
double wait_report_seconds();

// What a wait is for, in the words of its messages.
struct WaitFor {
  std::string what;                 // "every rank to join"
  std::vector<std::string> owners;  // per key: who publishes it ("rank 3")
  // Called with the keys present at each poll (may throw: a peer that joined with another world
  // size ends the wait at once instead of at the timeout).
  std::function<void(const std::vector<bool>&)> on_poll;
};

// The rendezvous key-value store: served by rank 0 over TCP (tcp_store.h), Gloo's file store (one
// host, or a shared file system) or Gloo's Redis store. The waiting is done here, once for all
// of them: polls until the keys exist or the deadline, with progress lines on stderr.
class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  // The deadline bounds the store's own I/O (a TCP store whose server stopped answering).
  virtual void set(const std::string& key, const std::vector<char>& value, const Deadline& deadline) = 0;
  // Sets the key unless it exists, atomically: of several processes racing, exactly one sees
  // true. The elastic agent decides a generation's membership this way (first writer wins).
  virtual bool set_if_absent(const std::string& key, const std::vector<char>& value, const Deadline& deadline);
  // Which of the keys exist now; does not wait for them.
  virtual std::vector<bool> present(const std::vector<std::string>& keys, const Deadline& deadline) = 0;
  // The value of a key that exists.
  virtual std::vector<char> get_now(const std::string& key, const Deadline& deadline) = 0;
  // "tcp://10.0.0.1:29500 (served by rank 0)", "file:/dir", ...
  virtual std::string describe() const = 0;
  // Removes the keys this process set, once every peer has read them. Gloo's file store never
  // overwrites a key, so keys left behind by a finished job would break the next job that
  // rendezvouses in the same directory. (The TCP store goes with rank 0's group.)
  virtual void forget_own_keys() {}
  // Whether the keys end with the job (the TCP store rank 0 serves): then a rank whose rendezvous
  // fails may leave a note for the others there, which a store outliving the job must not keep.
  virtual bool ends_with_job() const { return false; }
  // This process serves the store to the others (rank 0 of a TCP store).
  virtual bool serves_others() const { return false; }

  // Every key exists, or an Error naming what was waited for, who has not published, where,
  // and the time spent.
  void wait(const std::vector<std::string>& keys, const Deadline& deadline, const WaitFor& why);
  std::vector<char> get(const std::string& key, const Deadline& deadline, const WaitFor& why);

  // "rank 1 of 4", for messages.
  std::string who;
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

// A view of another store with every key under a prefix: the elastic agent's generations each
// rendezvous under their own ("mixtrain/elastic/g3/"), so no key is ever written twice (Gloo's file
// store refuses that) and a generation never reads an older one's keys.
class PrefixStore : public KeyValueStore {
 public:
  PrefixStore(std::shared_ptr<KeyValueStore> inner, std::string prefix);
  void set(const std::string& key, const std::vector<char>& value, const Deadline& deadline) override;
  bool set_if_absent(const std::string& key, const std::vector<char>& value, const Deadline& deadline) override;
  std::vector<bool> present(const std::vector<std::string>& keys, const Deadline& deadline) override;
  std::vector<char> get_now(const std::string& key, const Deadline& deadline) override;
  std::string describe() const override;
  void forget_own_keys() override { inner_->forget_own_keys(); }
  bool ends_with_job() const override { return inner_->ends_with_job(); }
  bool serves_others() const override { return inner_->serves_others(); }

 private:
  std::shared_ptr<KeyValueStore> inner_;
  std::string prefix_;
};

// Gloo's file and Redis stores (gloo_store.cpp; throw the reason when this build has no Gloo):
// spec "file:/dir" or "redis://host:port" ("redis:host:port"); prefix goes before every key.
std::shared_ptr<KeyValueStore> make_gloo_store(const std::string& spec, const std::string& prefix);
// A file store in a new directory of its own under $TMPDIR (or /tmp), removed with the store: a
// process alone (world size 1, no launcher) rendezvouses with nobody, so it shares no directory.
std::shared_ptr<KeyValueStore> make_private_store();
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
