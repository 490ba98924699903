#pragma once
// The Allocator interface every tensor storage goes through, on the CPU and on CUDA alike, so that
// statistics, limits and caching behave the same everywhere; and the per-device registry.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "mixtrain/base/device.h"

namespace mixtrain::memory {

struct Stats {
  int64_t allocated_bytes = 0;        // bytes in live blocks handed to callers (rounded sizes)
  int64_t reserved_bytes = 0;         // bytes held from the backing allocator (live + cached)
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
  int64_t requested_bytes = 0;        // bytes asked for by live allocations (unrounded)
  int64_t num_allocs = 0;             // allocate() calls served
  int64_t num_frees = 0;              // deallocate() calls
  int64_t num_backing_allocs = 0;     // calls to the backing allocator (cudaMalloc, malloc)
  int64_t num_backing_frees = 0;
  int64_t num_cache_hits = 0;         // requests served from cached blocks
  int64_t num_searches = 0;           // lookups of a free block in a pool (every cached request)
  int64_t num_plan_hits = 0;          // requests a static plan served from its arena (step_plan.h)
  int64_t num_plan_misses = 0;        // planned steps whose requests differed from the plan
  int64_t num_splits = 0;
  int64_t num_merges = 0;
  int64_t num_ooms = 0;
  int64_t num_alloc_retries = 0;      // misses that released the cache and tried again
  int64_t limit_bytes = -1;           // -1: no limit
  int64_t largest_free_block = 0;     // largest cached free block
};

void to_json(nlohmann::json& j, const Stats& s);

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory aligned to at least 64 bytes; nbytes == 0 returns a valid unique pointer.
  // Throws mixtrain::Error on out of memory, naming the size, the device and the statistics.
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr) = 0;
  virtual Device device() const = 0;
  virtual Stats stats() const = 0;
  virtual void reset_peak_stats() = 0;
  virtual void empty_cache() = 0;  // return cached free blocks to the backing allocator
  virtual std::string name() const = 0;
};

// The process-wide allocator of a device, created on first use from the environment
// (MIXTRAIN_ALLOCATOR_STRATEGY, MIXTRAIN_MEMORY_FRACTION, MIXTRAIN_MEMORY_LIMIT_MB).
Allocator& allocator_for(Device device);

// Replaces the allocator of a device (tests, custom strategies). The caller keeps ownership and
// must keep it alive while tensors allocated from it exist; nullptr restores the default.
void set_allocator(Device device, Allocator* allocator);

Stats stats(Device device);
void reset_peak_stats(Device device);
void empty_cache(Device device);

// Pinned (page-locked) host memory: one process-wide CachingAllocator over the backing the CUDA
// backend registers (cudaHostAlloc), serving CPU tensors made with TensorOptions().pinned_memory(true)
// or Tensor::pin_memory(). Its device() is the CPU; its statistics are separate from the CPU's.
// pinned_allocator() throws, saying why, when mixtrain has no CUDA backend or there is no device;
// pinned_memory_unavailable_reason() is that reason, or empty when pinned memory can be had.
Allocator& pinned_allocator();
std::string pinned_memory_unavailable_reason();
Stats pinned_stats();
void reset_pinned_peak_stats();
void empty_pinned_cache();
// Replaces the pinned allocator (tests); nullptr restores the default. As set_allocator.
void set_pinned_allocator(Allocator* allocator);

}  // namespace mixtrain::memory
