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

#include "mixtrain/distributed/process_group.h"

namespace mixtrain::distributed {

struct Work::State {
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
  Work enqueue(std::function<void()> fn);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The rendezvous key-value store (Gloo's file or Redis store underneath). get() waits for the key
// up to the timeout.
class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  virtual void set(const std::string& key, const std::vector<char>& value) = 0;
  virtual std::vector<char> get(const std::string& key) = 0;
  // Removes the keys this process set, once every peer has read them. Gloo's file store never
  // overwrites a key, so keys left behind by a finished job would break the next job that
  // rendezvouses in the same directory (the same MASTER_PORT).
  virtual void forget_own_keys() {}
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
};

// Gloo (gloo_backend.cpp; throws the reason when this build has no Gloo).
std::shared_ptr<KeyValueStore> make_store(const std::string& spec, std::chrono::milliseconds timeout);
// A file store in a new directory of its own under /tmp, removed with the store: a process alone
// (world size 1, no launcher) rendezvouses with nobody, so it shares no directory with other jobs.
std::shared_ptr<KeyValueStore> make_private_store(std::chrono::milliseconds timeout);
std::unique_ptr<ProcessGroup::Backend> make_gloo_backend(const std::shared_ptr<KeyValueStore>& store, int rank,
                                                         int world_size, const std::string& hostname,
                                                         std::chrono::milliseconds timeout);
// NCCL (nccl_backend.cpp; throws the reason when this build has no CUDA/NCCL).
std::unique_ptr<ProcessGroup::Backend> make_nccl_backend(KeyValueStore& store, const LaunchEnv& env,
                                                         std::chrono::milliseconds timeout);

// "all_reduce(float32 [10]) on rank 0 of 2" style description for error messages.
std::string describe(const char* op, const Tensor* t, int rank, int world_size);
// Sizes in elements of a dense tensor's data; Error naming the op unless dense.
void check_dense(const Tensor& t, const char* op);

}  // namespace mixtrain::distributed
