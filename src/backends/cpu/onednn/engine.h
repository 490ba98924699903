#pragma once
// What the oneDNN kernels (onednn/matmul.cpp, onednn/conv.cpp) share: the engine and a stream per
// thread, the thread discipline, per-thread buffers, the plan cache and error translation.
// Included only where oneDNN is built in (MIXTRAIN_WITH_ONEDNN).
//
// Threads. oneDNN's OpenMP runtime plans a primitive for omp_get_max_threads() threads when it is
// created and hands each thread its share by that plan when it runs; run on fewer (inside a
// parallel region, or while the governor of threads.h holds the regions on one thread) it would
// compute only the first thread's share. So every primitive here is created and run on one thread
// (OneThread), and the kernels cut the work themselves into parts fixed by the shape and the
// backend's full thread count, run through run_parallel: the governor times them like every other
// region, runs them in turn on one thread during a cool-down, and the result keeps its bits.
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include "backends/cpu/threads.h"
#include "mixtrain/base/error.h"

namespace mixtrain::backends::cpu::onednn {

extern std::atomic<int64_t> calls;  // onednn_calls() (switch.cpp)

const dnnl::engine& engine();
dnnl::stream& stream();  // this thread's

// This thread's OpenMP team size is 1 while it lives (oneDNN then plans and runs on this thread).
class OneThread {
 public:
  OneThread() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OneThread() { omp_set_num_threads(saved_); }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int saved_;
};

// 64-byte aligned memory kept per thread between calls, grown on demand: allocated fresh for
// every call, large buffers would come from mmap and cost their page faults each time (as the
// bf16 GEMM's packing buffers did, docs/CPU.md). One slot per use, so uses never overlap.
// The Wide* slots hold bf16 tensors widened to fp32 for the fp32 primitives where oneDNN has no
// bf16 (matmul.cpp, conv.cpp).
enum class Slot { Weights, Source, Destination, Scratchpad, DiffWeights, WideWeights, WideX, WideY, WideBias, Count };
void* thread_buffer(Slot slot, size_t bytes);

// Widening for the fp32 primitives where oneDNN has no bf16: room for n fp32 values in this
// thread's `slot`; n bf16 values at `from` widened (exactly) into it; n fp32 values rounded to
// nearest even into bf16 at `to`. Bulk conversions split over the threads (loops.h).
float* wide_buffer(int64_t n, Slot slot);
const float* widen(const void* from, int64_t n, Slot slot);
void narrow(const float* from, void* to, int64_t n);

// A 64-byte aligned heap block owned by one call.
class AlignedBuffer {
 public:
  explicit AlignedBuffer(size_t bytes);
  void* data() const { return data_.get(); }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> data_;
};

dnnl::memory wrap(const dnnl::memory::desc& md, const void* p);

// Runs a primitive on this thread's stream with a scratchpad from this thread's buffer.
void execute(const dnnl::primitive& prim, const dnnl::memory::desc& scratchpad,
             std::unordered_map<int, dnnl::memory> args);
// A reorder primitive (copying or converting between layouts and dtypes; to bf16 it rounds to
// nearest even) and what it runs on.
struct Reorder {
  dnnl::reorder prim;
  dnnl::memory::desc from, to, scratchpad;
};
Reorder make_reorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to);
void run_reorder(const Reorder& r, const void* src, void* dst);
// Attributes with the scratchpad in the caller's hands (execute above).
dnnl::primitive_attr user_scratchpad();

// Whether a primitive descriptor's implementation is worth taking: oneDNN's reference kernels
// ("ref:any") are plain loops, slower than the backend's own.
bool fast_impl(const char* impl);

// Plans (primitive descriptors, primitives, reorders) by key. Creating them takes tens to
// hundreds of microseconds, more than a small product; a plan is made once per shape. A key that
// oneDNN cannot take is kept too (a null plan), so it is asked once. Cleared when it holds too
// many, so shapes that change every step cannot grow it without bound.
template <class Plan>
class PlanCache {
 public:
  std::shared_ptr<const Plan> get(const std::string& key, const std::function<std::shared_ptr<const Plan>()>& make) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = plans_.find(key);
      if (it != plans_.end()) return it->second;
    }
    std::shared_ptr<const Plan> plan = make();  // outside the lock: creation is slow
    std::lock_guard<std::mutex> lock(mutex_);
    if (plans_.size() >= kMaxPlans) plans_.clear();
    return plans_.emplace(key, std::move(plan)).first->second;
  }

 private:
  static constexpr size_t kMaxPlans = 4096;
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const Plan>> plans_;
};

// A cache key from integers.
class Key {
 public:
  Key& operator<<(int64_t v) {
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof(v));
    return *this;
  }
  const std::string& str() const { return bytes_; }

 private:
  std::string bytes_;
};

// Makes a plan, returning null when oneDNN has no implementation for it (dnnl_unimplemented) or
// its descriptors do not take the shape (dnnl_invalid_arguments: a transposed convolution whose
// output_padding exceeds its stride, for one); any other failure is an Error naming the op and
// its operands. The tests that force oneDNN on check that the calls they make reach it.
template <class Plan, class Make>
std::shared_ptr<const Plan> try_plan(const char* op, const std::function<std::string()>& operands, Make&& make) {
  OneThread one;
  try {
    return make();
  } catch (const dnnl::error& e) {
    if (e.status == dnnl_unimplemented || e.status == dnnl_invalid_arguments) return nullptr;
    MT_ERROR(op, ": oneDNN could not plan ", operands(), ": ", e.what(), " (status ", static_cast<int>(e.status),
             "); MIXTRAIN_ONEDNN=0 runs the CPU's own kernels");
  }
}

// A oneDNN failure as an Error naming the op and its operands.
[[noreturn]] void fail(const char* op, const std::function<std::string()>& operands, const dnnl::error& e);

// Runs f on this thread with oneDNN planned for one thread; a oneDNN failure becomes fail()'s Error.
template <class F>
void run_here(const char* op, const std::function<std::string()>& operands, F&& f) {
  OneThread one;
  try {
    f();
  } catch (const dnnl::error& e) {
    fail(op, operands, e);
  }
}

// Runs body(part) for each part in [0, parts), each part's oneDNN work on one thread: through
// run_parallel (the governor's regions) or, inside a parallel region, in turn on this thread.
// An exception in a part is rethrown, as an Error naming the op and operands for oneDNN's, after
// all parts have ended.
void run_parts(int parts, const char* op, const std::function<std::string()>& operands,
               const std::function<void(int)>& body);

// The parts a call may be cut into: the backend's full thread count (threads.h), whatever the
// governor says now, so a cut, and so the result, does not depend on the load.
inline int full_parts() { return governor().full(); }

}  // namespace mixtrain::backends::cpu::onednn
