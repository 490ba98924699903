#include "mixtrain/memory/caching_allocator.h"
#include "mixtrain/memory/device_memory.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <vector>

#include "memory/step_session.h"
#include "mixtrain/base/error.h"

namespace mixtrain::memory {

namespace detail {
namespace {
thread_local StepSession* t_step_session = nullptr;
}
StepSession* current_step_session() { return t_step_session; }
StepSession* install_step_session(StepSession* session) {
  StepSession* previous = t_step_session;
  t_step_session = session;
  return previous;
}
}  // namespace detail

// ----------------------------------------------------------------------------------------------
// SystemBackingAllocator

void* SystemBackingAllocator::alloc(size_t nbytes) {
  if (nbytes > std::numeric_limits<size_t>::max() - kAlignment) return nullptr;
  // aligned_alloc wants a multiple of the alignment; 0 would give a non-unique pointer.
  const size_t size = std::max(kAlignment, (nbytes + kAlignment - 1) / kAlignment * kAlignment);
  return std::aligned_alloc(kAlignment, size);
}

void SystemBackingAllocator::free(void* ptr, size_t) { std::free(ptr); }

size_t SystemBackingAllocator::free_device_memory() {
  // MemAvailable counts reclaimable page cache, which MemFree (and _SC_AVPHYS_PAGES) would not.
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  return pages > 0 && page_size > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page_size) : 0;
}

// ----------------------------------------------------------------------------------------------
// Options

const char* strategy_name(Strategy s) {
  switch (s) {
    case Strategy::AutoGrowth: return "auto_growth";
    case Strategy::PreAllocate: return "pre_allocate";
    case Strategy::None: return "none";
  }
  return "?";
}

CachingAllocatorOptions& CachingAllocatorOptions::memory_fraction(double f) {
  MT_CHECK(f > 0.0 && f <= 1.0, "CachingAllocatorOptions: memory_fraction ", f, " must lie in (0, 1]");
  memory_fraction_ = f;
  return *this;
}

CachingAllocatorOptions& CachingAllocatorOptions::limit_bytes(int64_t bytes) {
  MT_CHECK(bytes >= -1, "CachingAllocatorOptions: limit_bytes ", bytes, " must be >= 0 (or -1 for none)");
  limit_bytes_ = bytes;
  return *this;
}

namespace {

// Empty counts as unset, so `MIXTRAIN_MEMORY_FRACTION= cmd` restores the default.
const char* env_value(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

// Plain decimal only: strtod would also take hex ("0x10"), "inf" and "nan".
bool parse_double(const char* text, double& out) {
  for (const char* c = text; *c; ++c)
    if (!std::strchr("0123456789.eE+-", *c)) return false;
  char* end = nullptr;
  out = std::strtod(text, &end);
  return end != text && *end == '\0' && out == out && out != std::numeric_limits<double>::infinity() &&
         out != -std::numeric_limits<double>::infinity();
}

}  // namespace

CachingAllocatorOptions CachingAllocatorOptions::from_env() {
  CachingAllocatorOptions o;
  if (const char* v = env_value("MIXTRAIN_ALLOCATOR_STRATEGY")) {
    const std::string s = v;
    if (s == "auto_growth") o.strategy(Strategy::AutoGrowth);
    else if (s == "pre_allocate") o.strategy(Strategy::PreAllocate);
    else if (s == "none") o.strategy(Strategy::None);
    else MT_ERROR("MIXTRAIN_ALLOCATOR_STRATEGY='", s, "' is not a strategy (expected auto_growth, pre_allocate or none)");
  }
  if (const char* v = env_value("MIXTRAIN_MEMORY_FRACTION")) {
    double f = 0;
    MT_CHECK(parse_double(v, f) && f > 0.0 && f <= 1.0, "MIXTRAIN_MEMORY_FRACTION='", v,
             "' must be a number in (0, 1]");
    o.memory_fraction(f);
  }
  if (const char* v = env_value("MIXTRAIN_MEMORY_LIMIT_MB")) {
    // Plain decimal digits with an optional fraction ("256", "0.5"): no sign, exponent or hex,
    // which once turned "0x10" into 16 and "1e-9" into a 0-byte cap. 2^43 MiB = 8 EiB bounds it
    // so the byte count fits in int64_t.
    const std::string text = v;
    const size_t dot = text.find('.');
    bool plain = !text.empty() && text.size() <= 32 && dot != 0 && dot + 1 != text.size() &&
                 std::count(text.begin(), text.end(), '.') <= 1;
    for (char c : text) plain = plain && ((c >= '0' && c <= '9') || c == '.');
    const double mb = plain ? std::strtod(v, nullptr) : -1.0;
    MT_CHECK(plain && mb < 8.0e12, "MIXTRAIN_MEMORY_LIMIT_MB='", v,
             "' must be a non-negative decimal number of MiB such as 256 or 0.5 (0 for no limit)");
    const auto bytes = static_cast<int64_t>(mb * 1024.0 * 1024.0);
    MT_CHECK(mb == 0.0 || bytes >= 1, "MIXTRAIN_MEMORY_LIMIT_MB='", v, "' is less than one byte (0 means no limit)");
    // 0 means no limit, as Paddle's FLAGS_gpu_memory_limit_mb does: a zero cap is never wanted.
    if (mb > 0.0) o.limit_bytes(bytes);
  }
  return o;
}

// ----------------------------------------------------------------------------------------------
// CachingAllocator

// A piece of a segment. The blocks of a segment form a doubly-linked list in address order, so
// a freed block finds its neighbours in O(1) to merge with them.
struct CachingAllocator::Block {
  void* ptr = nullptr;
  size_t size = 0;       // bytes of the segment this block covers
  size_t rounded = 0;    // while allocated: round_size(requested); counts as allocated_bytes
  size_t requested = 0;  // while allocated: what the caller asked for
  Pool* pool = nullptr;  // nullptr: a direct segment, returned to the backing allocator on free
  Block* prev = nullptr;
  Block* next = nullptr;
  bool allocated = false;
};

bool CachingAllocator::BlockOrder::operator()(const Block* a, const Block* b) const {
  if (a->size != b->size) return a->size < b->size;
  return std::less<void*>()(a->ptr, b->ptr);
}

CachingAllocator::CachingAllocator(BackingAllocator& backing, Device device, CachingAllocatorOptions options)
    : backing_(backing), device_(device), options_(options) {}

CachingAllocator::CachingAllocator(std::unique_ptr<BackingAllocator> backing, Device device,
                                   CachingAllocatorOptions options)
    : owned_backing_(std::move(backing)), backing_(*owned_backing_), device_(device), options_(options) {}

CachingAllocator::~CachingAllocator() {
  // Arenas whose plans are gone but whose escaped buffers were never freed; their blocks are in
  // live_ and go back with their segments below.
  for (auto& entry : arenas_) delete entry.second;
  std::set<Block*> roots;
  auto add_root = [&](Block* b) {
    while (b->prev) b = b->prev;
    roots.insert(b);
  };
  for (Pool* pool : {&small_pool_, &large_pool_, &chunk_pool_})
    for (Block* b : *pool) add_root(b);
  for (auto& entry : live_) add_root(entry.second);
  for (Block* root : roots) {
    size_t total = 0;
    for (Block* b = root; b;) {
      Block* next = b->next;
      total += b->size;
      if (b != root) delete b;
      b = next;
    }
    backing_.free(root->ptr, total);
    delete root;
  }
}

size_t CachingAllocator::round_size(size_t nbytes) {
  if (nbytes <= kMinBlockSize) return kMinBlockSize;
  return (nbytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

size_t CachingAllocator::segment_size(size_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

std::string CachingAllocator::name() const {
  return std::string("caching(") + strategy_name(options_.strategy()) + ", " + device_.str() + ", " +
         backing_.name() + ")";
}

size_t CachingAllocator::headroom() const {
  if (options_.limit_bytes() < 0) return std::numeric_limits<size_t>::max();
  const int64_t room = options_.limit_bytes() - stats_.reserved_bytes;
  return room > 0 ? static_cast<size_t>(room) : 0;
}

void* CachingAllocator::allocate(size_t nbytes) {
  // A plan replaying on this thread serves its in-step requests before any lock is taken.
  detail::StepSession* session = detail::t_step_session;
  if (session && session->allocator() == this) {
    if (void* p = session->allocate(nbytes)) return p;
  } else {
    session = nullptr;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  // Sizes this large cannot be rounded without overflow, and no device has them anyway.
  if (nbytes > std::numeric_limits<size_t>::max() / 2) {
    refused_by_limit_ = false;
    throw_oom(nbytes, nbytes);
  }
  const size_t rounded = round_size(nbytes);
  Block* block = try_allocate(rounded, true);
  if (!block) {
    // Cached free segments may be what stands in the way (of the limit or of the device):
    // return them and try once more before giving up.
    ++stats_.num_alloc_retries;
    release_cached_segments();
    block = try_allocate(rounded, false);
  }
  if (!block) throw_oom(nbytes, rounded);

  block->allocated = true;
  block->rounded = rounded;
  block->requested = nbytes;
  live_.emplace(block->ptr, block);
  ++stats_.num_allocs;
  stats_.allocated_bytes += static_cast<int64_t>(rounded);
  stats_.requested_bytes += static_cast<int64_t>(nbytes);
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  if (session) session->served(block->ptr, nbytes, rounded);
  return block->ptr;
}

CachingAllocator::Block* CachingAllocator::try_allocate(size_t rounded, bool may_acquire_chunk) {
  switch (options_.strategy()) {
    case Strategy::None:
      return new_segment(nullptr, rounded, rounded);
    case Strategy::PreAllocate: {
      // The OOM retry must not re-take the chunk it just released: that would starve the
      // direct allocation the retry is for.
      const bool fresh_chunk = may_acquire_chunk && !chunk_attempted_ && acquire_chunk();
      if (Block* b = take_from_pool(chunk_pool_, rounded)) {
        if (!fresh_chunk) ++stats_.num_cache_hits;
        return b;
      }
      return new_segment(nullptr, rounded, rounded);
    }
    case Strategy::AutoGrowth: {
      Pool& pool = rounded <= kSmallSize ? small_pool_ : large_pool_;
      if (Block* b = take_from_pool(pool, rounded)) {
        ++stats_.num_cache_hits;
        return b;
      }
      Block* b = new_segment(&pool, segment_size(rounded), rounded);
      if (b) split(pool, b, rounded);
      return b;
    }
  }
  return nullptr;
}

CachingAllocator::Block* CachingAllocator::take_from_pool(Pool& pool, size_t rounded) {
  ++stats_.num_searches;
  Block key;
  key.size = rounded;  // ptr nullptr orders before every real block of the same size
  auto it = pool.lower_bound(&key);
  if (it == pool.end()) return nullptr;
  Block* b = *it;
  pool.erase(it);
  split(pool, b, rounded);
  return b;
}

CachingAllocator::Block* CachingAllocator::new_segment(Pool* pool, size_t preferred, size_t rounded) {
  size_t size = preferred;
  const size_t room = headroom();
  if (size > room) {
    refused_by_limit_ = true;
    if (rounded > room) return nullptr;
    // Near the limit a smaller segment still serves the request.
    size = room / kMinBlockSize * kMinBlockSize;
  }
  void* ptr = backing_.alloc(size);
  if (!ptr && size > rounded) {
    // Near the device's capacity, likewise.
    size = rounded;
    ptr = backing_.alloc(size);
  }
  if (!ptr) {
    refused_by_limit_ = false;
    return nullptr;
  }
  ++stats_.num_backing_allocs;
  stats_.reserved_bytes += static_cast<int64_t>(size);
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  Block* b = new Block;
  b->ptr = ptr;
  b->size = size;
  b->pool = pool;
  return b;
}

bool CachingAllocator::acquire_chunk() {
  chunk_attempted_ = true;
  const double want = options_.memory_fraction() * static_cast<double>(backing_.free_device_memory());
  size_t size = want >= static_cast<double>(std::numeric_limits<size_t>::max() / 2)
                    ? std::numeric_limits<size_t>::max() / 2
                    : static_cast<size_t>(want);
  size = std::min(size, headroom()) / kMinBlockSize * kMinBlockSize;
  if (size == 0) return false;
  void* ptr = backing_.alloc(size);
  // A refused chunk is not an error: requests then go to the backing allocator one by one.
  if (!ptr) return false;
  ++stats_.num_backing_allocs;
  stats_.reserved_bytes += static_cast<int64_t>(size);
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  Block* b = new Block;
  b->ptr = ptr;
  b->size = size;
  b->pool = &chunk_pool_;
  chunk_pool_.insert(b);
  return true;
}

void CachingAllocator::split(Pool& pool, Block* block, size_t rounded) {
  const size_t remainder = block->size - rounded;
  // A large-pool remainder of 1 MiB or less is not worth a block: only small requests could use
  // it, and those are served from the small pool.
  const bool worth_it = &pool == &large_pool_ ? remainder > kSmallSize : remainder >= kMinBlockSize;
  if (!worth_it) return;
  Block* rest = new Block;
  rest->ptr = static_cast<char*>(block->ptr) + rounded;
  rest->size = remainder;
  rest->pool = &pool;
  rest->prev = block;
  rest->next = block->next;
  if (block->next) block->next->prev = rest;
  block->next = rest;
  block->size = rounded;
  pool.insert(rest);
  ++stats_.num_splits;
}

void CachingAllocator::deallocate(void* ptr) {
  if (!ptr) return;
  detail::StepSession* session = detail::t_step_session;
  if (session && session->allocator() == this) {
    if (session->deallocate(ptr)) return;
  } else {
    session = nullptr;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end() && free_arena_buffer(ptr)) return;
  MT_CHECK(it != live_.end(), "CachingAllocator::deallocate: pointer ", ptr, " on ", device_,
           " was not allocated by this allocator, or was already freed");
  if (session) session->freed(ptr, it->second->rounded);
  free_live(it);
}

void CachingAllocator::free_live(std::unordered_map<void*, Block*>::iterator it) {
  Block* block = it->second;
  live_.erase(it);
  ++stats_.num_frees;
  stats_.allocated_bytes -= static_cast<int64_t>(block->rounded);
  stats_.requested_bytes -= static_cast<int64_t>(block->requested);
  block->allocated = false;
  block->rounded = block->requested = 0;
  if (block->pool) {
    free_block(block);
  } else {
    release_segment(block);
  }
}

void CachingAllocator::free_block(Block* block) {
  Pool& pool = *block->pool;
  if (block->prev && !block->prev->allocated) {
    Block* prev = block->prev;
    pool.erase(prev);  // before its size changes: the size is part of the set's key
    merge(prev, block);
    block = prev;
  }
  if (block->next && !block->next->allocated) {
    Block* next = block->next;
    pool.erase(next);
    merge(block, next);
  }
  pool.insert(block);
}

void CachingAllocator::merge(Block* into, Block* from) {
  into->size += from->size;
  into->next = from->next;
  if (from->next) from->next->prev = into;
  delete from;
  ++stats_.num_merges;
}

void CachingAllocator::release_segment(Block* block) {
  backing_.free(block->ptr, block->size);
  ++stats_.num_backing_frees;
  stats_.reserved_bytes -= static_cast<int64_t>(block->size);
  delete block;
}

void CachingAllocator::release_cached_segments() {
  for (Pool* pool : {&small_pool_, &large_pool_, &chunk_pool_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      // Only whole segments can go back; a free block beside a live one is part of a segment.
      if (b->prev || b->next) {
        ++it;
        continue;
      }
      it = pool->erase(it);
      if (pool == &chunk_pool_) chunk_attempted_ = false;
      release_segment(b);
    }
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_segments();
}

Stats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Stats s = stats_;
  s.limit_bytes = options_.limit_bytes();
  s.num_plan_hits = plan_hits_.load(std::memory_order_relaxed);
  s.num_plan_misses = plan_misses_.load(std::memory_order_relaxed);
  s.largest_free_block = 0;
  for (const Pool* pool : {&small_pool_, &large_pool_, &chunk_pool_})
    if (!pool->empty()) s.largest_free_block = std::max(s.largest_free_block, static_cast<int64_t>((*pool->rbegin())->size));
  return s;
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

namespace {
std::string human_bytes(int64_t bytes) { return std::to_string(bytes) + " bytes (" + format_bytes(bytes) + ")"; }
}  // namespace

void CachingAllocator::throw_oom(size_t nbytes, size_t rounded) {
  ++stats_.num_ooms;
  int64_t largest = 0;
  for (const Pool* pool : {&small_pool_, &large_pool_, &chunk_pool_})
    if (!pool->empty()) largest = std::max(largest, static_cast<int64_t>((*pool->rbegin())->size));
  const int64_t limit = options_.limit_bytes();
  std::ostringstream os;
  os << "CachingAllocator::allocate: out of memory on " << device_ << ": tried to allocate " << nbytes << " bytes (rounded to "
     << rounded << "); allocated " << human_bytes(stats_.allocated_bytes) << ", reserved "
     << human_bytes(stats_.reserved_bytes) << " (reserved but unallocated "
     << human_bytes(stats_.reserved_bytes - stats_.allocated_bytes) << "), limit "
     << (limit < 0 ? std::string("none") : human_bytes(limit)) << ", largest free block "
     << human_bytes(largest) << "; "
     << (refused_by_limit_ ? "the memory limit would be exceeded"
                           : "the backing allocator (" + backing_.name() + ") refused")
     << " [" << name() << "]";
  MT_ERROR(os.str());
}

}  // namespace mixtrain::memory
