// Random operation sequences checked against a model after every step, and concurrent use.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "memory/counting_backing.h"
#include "mixtrain/base/error.h"
#include "mixtrain/memory/caching_allocator.h"

namespace mixtrain::memory::testing {
namespace {

size_t round512(size_t n) { return n == 0 ? 512 : (n + 511) / 512 * 512; }

// Sizes from 0 bytes to 32 MiB, log-uniform, so every pool and segment rule gets exercised.
size_t random_size(std::mt19937_64& rng) {
  const int e = std::uniform_int_distribution<int>(0, 25)(rng);
  if (e == 0) return std::uniform_int_distribution<size_t>(0, 1)(rng);
  return std::uniform_int_distribution<size_t>(size_t{1} << (e - 1), size_t{1} << e)(rng);
}

// Writing every byte of tens of MiB each step would dominate the run; small blocks are filled
// whole, large ones at the head, the tail and a stripe per MiB, which is where a neighbour
// overlapping them would land.
template <class F>
void for_each_checked_range(size_t n, F f) {
  constexpr size_t kWhole = 256 * KiB, kEdge = 64 * KiB, kStripe = 4 * KiB;
  if (n <= kWhole) return f(0, n);
  f(0, kEdge);
  f(n - kEdge, kEdge);
  for (size_t off = MiB; off + kStripe < n - kEdge; off += MiB) f(off, kStripe);
}

void fill(void* p, size_t n, unsigned char tag) {
  for_each_checked_range(n, [&](size_t off, size_t len) { std::memset(static_cast<char*>(p) + off, tag, len); });
}

bool intact(const void* p, size_t n, unsigned char tag) {
  bool ok = true;
  for_each_checked_range(n, [&](size_t off, size_t len) {
    const auto* b = static_cast<const unsigned char*>(p) + off;
    for (size_t i = 0; i < len && ok; ++i) ok = b[i] == tag;
  });
  return ok;
}

struct Live {
  size_t requested;
  unsigned char tag;
};

struct Config {
  std::string name;
  CachingAllocatorOptions options;
  size_t capacity = CountingBackingAllocator::kUnlimited;
  size_t reported_free = 0;
  bool may_oom = false;
};

class AllocatorProperty : public ::testing::TestWithParam<Config> {};

TEST_P(AllocatorProperty, RandomOperationsMatchTheModel) {
  const Config& cfg = GetParam();
  CountingBackingAllocator backing(cfg.capacity, cfg.reported_free);
  CachingAllocator a(backing, Device::cpu(), cfg.options);
  std::mt19937_64 rng(12345);
  std::map<uintptr_t, Live> live;  // the model, by start address
  int64_t model_allocated = 0, model_requested = 0, model_peak = 0, ooms = 0, successes = 0;
  constexpr int kOps = 4000;
  constexpr size_t kMaxLive = 48;

  for (int op = 0; op < kOps; ++op) {
    const double dice = std::uniform_real_distribution<double>(0, 1)(rng);
    if (dice < 0.01) {
      a.empty_cache();
    } else if (dice < 0.015) {
      a.reset_peak_stats();
      backing.reset_peak();
      model_peak = model_allocated;
    } else if (live.empty() || (live.size() < kMaxLive && dice < 0.55)) {
      const size_t n = random_size(rng);
      void* p = nullptr;
      try {
        p = a.allocate(n);
      } catch (const Error& e) {
        ASSERT_TRUE(cfg.may_oom) << "op " << op << ": " << e.what();
        ++ooms;
      }
      if (p) {
        ++successes;
        ASSERT_EQ(addr(p) % 64, 0u);
        const auto tag = static_cast<unsigned char>(op % 251 + 1);
        fill(p, n, tag);
        ASSERT_TRUE(live.emplace(addr(p), Live{n, tag}).second) << "pointer handed out twice";
        model_allocated += static_cast<int64_t>(round512(n));
        model_requested += static_cast<int64_t>(n);
        model_peak = std::max(model_peak, model_allocated);
      }
    } else {
      auto it = std::next(live.begin(), std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng));
      void* p = reinterpret_cast<void*>(it->first);
      ASSERT_TRUE(intact(p, it->second.requested, it->second.tag)) << "op " << op << ": block overwritten";
      model_allocated -= static_cast<int64_t>(round512(it->second.requested));
      model_requested -= static_cast<int64_t>(it->second.requested);
      live.erase(it);
      a.deallocate(p);
    }

    const Stats s = a.stats();
    ASSERT_EQ(s.allocated_bytes, model_allocated) << "op " << op;
    ASSERT_EQ(s.requested_bytes, model_requested) << "op " << op;
    ASSERT_EQ(s.reserved_bytes, static_cast<int64_t>(backing.held())) << "op " << op;
    ASSERT_GE(s.reserved_bytes, s.allocated_bytes) << "op " << op;
    ASSERT_EQ(s.peak_allocated_bytes, model_peak) << "op " << op;
    ASSERT_EQ(s.peak_reserved_bytes, static_cast<int64_t>(backing.peak_held())) << "op " << op;
    ASSERT_GE(s.peak_reserved_bytes, s.reserved_bytes);
    ASSERT_EQ(s.num_allocs - s.num_frees, static_cast<int64_t>(live.size()));
    ASSERT_EQ(s.num_backing_allocs - s.num_backing_frees, static_cast<int64_t>(backing.segments()));
    ASSERT_EQ(s.num_ooms, ooms);
    ASSERT_LE(s.largest_free_block, s.reserved_bytes - s.allocated_bytes);
    if (s.limit_bytes >= 0) {
      ASSERT_LE(s.reserved_bytes, s.limit_bytes);
    }
    uintptr_t end = 0;
    for (auto& [start, block] : live) {
      ASSERT_GE(start, end) << "op " << op << ": live blocks overlap";
      end = start + round512(block.requested);
    }
  }
  EXPECT_GT(successes, kOps / 4);
  if (cfg.may_oom) {
    EXPECT_GT(ooms, 0) << "this configuration is meant to reach the OOM path";
  }
  for (auto& [start, block] : live) {
    EXPECT_TRUE(intact(reinterpret_cast<void*>(start), block.requested, block.tag));
    a.deallocate(reinterpret_cast<void*>(start));
  }
  EXPECT_EQ(a.stats().allocated_bytes, 0);
  EXPECT_EQ(a.stats().requested_bytes, 0);
}

std::vector<Config> configs() {
  using O = CachingAllocatorOptions;
  std::vector<Config> c;
  c.push_back({"auto_growth", O()});
  c.push_back({"auto_growth_small_device", O(), 96 * MiB, 0, true});
  c.push_back({"auto_growth_limit", O().limit_bytes(64 * MiB), CountingBackingAllocator::kUnlimited, 0, true});
  c.push_back({"pre_allocate", O().strategy(Strategy::PreAllocate).memory_fraction(0.5),
               CountingBackingAllocator::kUnlimited, 128 * MiB});
  c.push_back({"pre_allocate_small_device", O().strategy(Strategy::PreAllocate), 160 * MiB, 0, true});
  c.push_back({"none", O().strategy(Strategy::None)});
  c.push_back({"none_limit", O().strategy(Strategy::None).limit_bytes(48 * MiB),
               CountingBackingAllocator::kUnlimited, 0, true});
  return c;
}

INSTANTIATE_TEST_SUITE_P(Strategies, AllocatorProperty, ::testing::ValuesIn(configs()),
                         [](const ::testing::TestParamInfo<Config>& info) { return info.param.name; });

TEST(AllocatorThreads, AllocateInOneThreadFreeInAnother) {
  CountingBackingAllocator backing;
  CachingAllocator a(backing, Device::cpu());
  constexpr int kCount = 20000;
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<std::pair<void*, uint64_t>> queue;
  std::atomic<int> corrupted{0};

  std::thread producer([&] {
    std::mt19937_64 rng(1);
    for (uint64_t i = 0; i < kCount; ++i) {
      const size_t n = i % 100 == 0 ? 3 * MiB : std::uniform_int_distribution<size_t>(8, 64 * KiB)(rng);
      void* p = a.allocate(n);
      std::memcpy(p, &i, sizeof i);
      std::lock_guard<std::mutex> lock(mutex);
      queue.emplace_back(p, i);
      ready.notify_one();
    }
  });
  std::thread consumer([&] {
    for (int done = 0; done < kCount; ++done) {
      std::unique_lock<std::mutex> lock(mutex);
      ready.wait(lock, [&] { return !queue.empty(); });
      auto [p, i] = queue.front();
      queue.pop_front();
      lock.unlock();
      uint64_t seen = 0;
      std::memcpy(&seen, p, sizeof seen);
      if (seen != i) ++corrupted;
      a.deallocate(p);
    }
  });
  producer.join();
  consumer.join();
  EXPECT_EQ(corrupted.load(), 0);
  const Stats s = a.stats();
  EXPECT_EQ(s.num_allocs, kCount);
  EXPECT_EQ(s.num_frees, kCount);
  EXPECT_EQ(s.allocated_bytes, 0);
  EXPECT_EQ(s.requested_bytes, 0);
  EXPECT_EQ(s.reserved_bytes, static_cast<int64_t>(backing.held()));
  EXPECT_EQ(s.num_backing_allocs - s.num_backing_frees, static_cast<int64_t>(backing.segments()));
}

TEST(AllocatorThreads, ConcurrentAllocateAndFreeKeepBlocksApart) {
  CountingBackingAllocator backing;
  CachingAllocator a(backing, Device::cpu());
  constexpr int kThreads = 4, kOps = 4000;
  std::atomic<int> corrupted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      std::vector<std::pair<void*, size_t>> mine;
      const auto tag = static_cast<unsigned char>(t + 1);
      for (int op = 0; op < kOps; ++op) {
        if (mine.empty() || (mine.size() < 16 && rng() % 2)) {
          const size_t n = std::uniform_int_distribution<size_t>(1, 4 * MiB)(rng) >> (rng() % 8);
          void* p = a.allocate(n);
          fill(p, n, tag);
          mine.emplace_back(p, n);
        } else {
          const size_t k = rng() % mine.size();
          if (!intact(mine[k].first, mine[k].second, tag)) ++corrupted;
          a.deallocate(mine[k].first);
          mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(k));
        }
      }
      for (auto& [p, n] : mine) a.deallocate(p);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(corrupted.load(), 0);
  const Stats s = a.stats();
  EXPECT_EQ(s.num_allocs, s.num_frees);
  EXPECT_EQ(s.allocated_bytes, 0);
  EXPECT_EQ(s.reserved_bytes, static_cast<int64_t>(backing.held()));
  EXPECT_GE(s.peak_reserved_bytes, s.peak_allocated_bytes);
}

}  // namespace
}  // namespace mixtrain::memory::testing
