#pragma once
// The device-agnostic caching allocator: size classes, best-fit reuse, block split/merge, a hard
// limit and an OOM ladder, written once and run over whatever BackingAllocator a device provides
// (aligned_alloc on the CPU, cudaMalloc on CUDA). See docs/ALLOCATOR.md.
//
// Stream safety (CUDA): the BackingAllocator knows nothing of streams, and neither does this
// class. That is sound because the CUDA backend issues all work of a device on one stream: a
// block freed on the host is only handed out again to work enqueued after the free, on that same
// stream, so the device never sees the new owner's writes before the old owner's reads finish.
// A backend that adds more streams must key the pools by stream (as PyTorch does) or park freed
// blocks until an event recorded at free time completes; the place for that is deallocate(),
// before the block returns to its pool.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include "mixtrain/memory/allocator.h"

namespace mixtrain::memory {

namespace detail {
struct Arena;
}

// Where segments come from. Implementations need not be thread safe: the CachingAllocator calls
// them under its own mutex.
class BackingAllocator {
 public:
  virtual ~BackingAllocator() = default;
  // Returns at least 64-byte aligned memory, or nullptr when it refuses (out of memory).
  virtual void* alloc(size_t nbytes) = 0;
  // nbytes is the size that was passed to alloc().
  virtual void free(void* ptr, size_t nbytes) = 0;
  // Bytes the device could still give out; sizes the PreAllocate chunk.
  virtual size_t free_device_memory() = 0;
  virtual std::string name() const = 0;
};

// The CPU backing: aligned_alloc with kAlignment. It never refuses (a failed aligned_alloc is
// reported as a refusal, but the OS usually overcommits), and reports physical free memory.
class SystemBackingAllocator : public BackingAllocator {
 public:
  static constexpr size_t kAlignment = 256;  // matches cudaMalloc, so CPU and CUDA layouts agree
  void* alloc(size_t nbytes) override;
  void free(void* ptr, size_t nbytes) override;
  size_t free_device_memory() override;
  std::string name() const override { return "system"; }
};

enum class Strategy {
  AutoGrowth,   // grow segment by segment as requests miss the cache (default)
  PreAllocate,  // take fraction * free memory as one segment at first use, serve from it
  None,         // no caching: every request goes to the backing allocator (debugging, measuring)
};

const char* strategy_name(Strategy s);  // "auto_growth", "pre_allocate", "none"

struct CachingAllocatorOptions {
  CachingAllocatorOptions& strategy(Strategy s) {
    strategy_ = s;
    return *this;
  }
  // Share of backing.free_device_memory() that PreAllocate takes; must lie in (0, 1].
  CachingAllocatorOptions& memory_fraction(double f);
  // Hard cap on reserved bytes; -1 means no limit.
  CachingAllocatorOptions& limit_bytes(int64_t bytes);

  Strategy strategy() const { return strategy_; }
  double memory_fraction() const { return memory_fraction_; }
  int64_t limit_bytes() const { return limit_bytes_; }

  // Reads MIXTRAIN_ALLOCATOR_STRATEGY (auto_growth|pre_allocate|none), MIXTRAIN_MEMORY_FRACTION
  // ((0,1], default 0.92) and MIXTRAIN_MEMORY_LIMIT_MB (MiB, >= 0; 0 or unset: no limit). Unset or
  // empty variables keep the defaults; bad values throw naming the variable and the value.
  static CachingAllocatorOptions from_env();

 private:
  Strategy strategy_ = Strategy::AutoGrowth;
  double memory_fraction_ = 0.92;
  int64_t limit_bytes_ = -1;
};

class CachingAllocator : public Allocator {
 public:
  static constexpr size_t kMinBlockSize = 512;             // every size is a multiple of this
  static constexpr size_t kSmallSize = size_t{1} << 20;    // requests up to this use the small pool
  static constexpr size_t kSmallBuffer = size_t{2} << 20;  // segment size of the small pool
  static constexpr size_t kMinLargeAlloc = size_t{10} << 20;
  static constexpr size_t kLargeBuffer = size_t{20} << 20;  // segment for (1 MiB, 10 MiB) requests
  static constexpr size_t kRoundLarge = size_t{2} << 20;    // larger segments round to this

  // The backing allocator must outlive this object.
  CachingAllocator(BackingAllocator& backing, Device device,
                   CachingAllocatorOptions options = CachingAllocatorOptions());
  CachingAllocator(std::unique_ptr<BackingAllocator> backing, Device device,
                   CachingAllocatorOptions options = CachingAllocatorOptions());
  // Returns every segment to the backing allocator, including those with live blocks.
  ~CachingAllocator() override;
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr) override;
  Device device() const override { return device_; }
  Stats stats() const override;
  void reset_peak_stats() override;
  void empty_cache() override;
  std::string name() const override;

  const CachingAllocatorOptions& options() const { return options_; }
  // The size a request is served with: a multiple of kMinBlockSize, at least kMinBlockSize.
  static size_t round_size(size_t nbytes);
  // The segment AutoGrowth asks the backing allocator for on a miss of a rounded size.
  static size_t segment_size(size_t rounded);

  // For static plans (src/memory/step_plan.cpp): an arena is one allocation of bytes plus
  // kMinBlockSize, carved by the plan. Retiring frees it now, or, while buffers of it are still
  // live (a planned step let one escape), when the last of them is freed.
  detail::Arena* create_arena(size_t bytes);
  void retire_arena(detail::Arena* arena);
  void count_plan_hit() { plan_hits_.fetch_add(1, std::memory_order_relaxed); }
  void count_plan_miss() { plan_misses_.fetch_add(1, std::memory_order_relaxed); }

 private:
  struct Block;
  struct BlockOrder {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockOrder>;

  Block* try_allocate(size_t rounded, bool may_acquire_chunk);
  Block* take_from_pool(Pool& pool, size_t rounded);
  Block* new_segment(Pool* pool, size_t preferred, size_t rounded);
  bool acquire_chunk();
  void split(Pool& pool, Block* block, size_t rounded);
  void free_live(std::unordered_map<void*, Block*>::iterator it);  // mutex held
  bool free_arena_buffer(void* ptr);                                  // mutex held
  void free_block(Block* block);
  void merge(Block* into, Block* from);  // into is the lower neighbour; from is deleted
  void release_cached_segments();
  void release_segment(Block* block);
  size_t headroom() const;  // bytes still allowed under the limit
  [[noreturn]] void throw_oom(size_t nbytes, size_t rounded);

  std::unique_ptr<BackingAllocator> owned_backing_;
  BackingAllocator& backing_;
  Device device_;
  CachingAllocatorOptions options_;

  mutable std::mutex mutex_;
  Pool small_pool_;
  Pool large_pool_;
  Pool chunk_pool_;  // PreAllocate: blocks of the pre-allocated chunk
  bool chunk_attempted_ = false;  // PreAllocate takes its chunk once, until empty_cache frees it
  bool refused_by_limit_ = false;  // why the last new_segment failed, for the OOM message
  std::unordered_map<void*, Block*> live_;
  std::map<const char*, detail::Arena*> arenas_;  // by base, for frees of escaped arena buffers
  Stats stats_;
  // Counted by plans on their own threads, without the mutex.
  std::atomic<int64_t> plan_hits_{0};
  std::atomic<int64_t> plan_misses_{0};
};

}  // namespace mixtrain::memory
