#pragma once
// Pieces shared by the autocast sources: the thread's autocast state, the weight-cast cache and
// the statistics counters. Not a public header.
#include <atomic>
#include <cstdint>

#include "mixtrain/amp/autocast.h"
#include "mixtrain/core/tensor.h"
#include "mixtrain/memory/trace.h"

namespace mixtrain::amp::detail {

struct ThreadState {
  std::array<bool, kNumDeviceTypes> enabled{};                   // per device type
  std::array<DType, kNumDeviceTypes> dtype{kFloat16, kFloat16, kFloat16};  // per device type
  bool cache_enabled = true;
  int nesting = 0;  // live AutocastGuards on this thread, enabled or not
};

ThreadState& thread_state();

inline int device_index(DeviceType t) { return static_cast<int>(t); }
// The autocast state a tensor follows: its device type's, except that meta tensors in a dry run
// follow the target's, so the dry run casts what the real step would.
inline int autocast_index(DeviceType t) {
  return device_index(t == DeviceType::Meta ? memory::meta_autocast_device_type() : t);
}

// Installs the pre-dispatch hook (once per process).
void install_hook_once();

// The cast of a cacheable weight (fp32 leaf that requires grad, not a view) to `dtype`: reused
// from the cache when this thread made it earlier in its outermost scope, else made and stored.
Tensor cached_cast(const Tensor& weight, DType dtype);
// Drops the casts the calling thread cached (its outermost scope has ended).
void clear_thread_cache();

// Counters behind autocast_stats(); relaxed atomics, summed over threads.
struct Counters {
  std::atomic<uint64_t> ops[kNumDTypes][kNumCastPolicies] = {};
  std::atomic<uint64_t> casts{0};
  std::atomic<uint64_t> cast_bytes{0};
  std::atomic<uint64_t> cache_hits{0};
  std::atomic<uint64_t> cache_misses{0};
};
Counters& counters();

inline void count_cast(const Tensor& out) {
  Counters& c = counters();
  c.casts.fetch_add(1, std::memory_order_relaxed);
  c.cast_bytes.fetch_add(out.nbytes(), std::memory_order_relaxed);
}

}  // namespace mixtrain::amp::detail
