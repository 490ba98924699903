// CachingAllocator behaviour, one rule per test, against the counting test double. Expected
// sizes come from the documented design (PyTorch's constants, docs/ALLOCATOR.md), not from the code.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "memory/counting_backing.h"
#include "mixtrain/base/error.h"
#include "mixtrain/memory/caching_allocator.h"
#include "support/testing.h"

namespace mixtrain::memory::testing {
namespace {

using Options = CachingAllocatorOptions;

size_t round512(size_t n) { return n == 0 ? 512 : (n + 511) / 512 * 512; }

std::string oom_message(CachingAllocator& a, size_t n) {
  const std::string message = mixtrain::testing::error_of([&] { a.allocate(n); });
  EXPECT_NE(message, mixtrain::testing::kNoError) << "allocate(" << n << ") did not throw";
  return message;
}

TEST(CachingAllocator, RoundsSizesAndSegmentsAsDocumented) {
  EXPECT_EQ(CachingAllocator::round_size(0), 512u);
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::round_size(3 * MiB + 1), 3 * MiB + 512);
  EXPECT_EQ(CachingAllocator::segment_size(512), 2 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(1 * MiB), 2 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(1 * MiB + 512), 20 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(10 * MiB - 512), 20 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(10 * MiB), 10 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(10 * MiB + 512), 12 * MiB);
}

TEST(CachingAllocator, ZeroBytesGivesDistinctAlignedPointers) {
  CountingBackingAllocator backing;
  CachingAllocator a(backing, Device::cpu());
  void* p = a.allocate(0);
  void* q = a.allocate(0);
  ASSERT_NE(p, nullptr);
  ASSERT_NE(q, nullptr);
  EXPECT_NE(p, q);
  EXPECT_EQ(a.stats().allocated_bytes, 1024);
  EXPECT_EQ(a.stats().requested_bytes, 0);
  for (size_t n : {size_t{1}, size_t{63}, size_t{65}, size_t{513}, MiB + 1, 15 * MiB + 3})
    EXPECT_EQ(addr(a.allocate(n)) % 64, 0u) << n;
}

TEST(CachingAllocator, BestFitPicksTheSmallestFreeBlockThatFits) {
  CountingBackingAllocator backing;
  CachingAllocator a(backing, Device::cpu());
  // Free holes of 16, 4 and 8 KiB, kept apart by live guards, plus the segment's large tail.
  void* h16 = a.allocate(16 * KiB);
  a.allocate(512);
  void* h4 = a.allocate(4 * KiB);
  a.allocate(512);
  void* h8 = a.allocate(8 * KiB);
  a.allocate(512);
  ASSERT_EQ(backing.allocs(), 1);
  a.deallocate(h16);
  a.deallocate(h4);
  a.deallocate(h8);
  const int64_t hits = a.stats().num_cache_hits;
  EXPECT_EQ(a.allocate(3 * KiB), h4);
  EXPECT_EQ(a.allocate(6 * KiB), h8);
  EXPECT_EQ(a.allocate(10 * KiB), h16);
  EXPECT_EQ(backing.allocs(), 1);
  EXPECT_EQ(a.stats().num_cache_hits, hits + 3);
}

TEST(CachingAllocator, BestFitAcrossLargeSegments) {
  CountingBackingAllocator backing;
  CachingAllocator a(backing, Device::cpu());
  void* p16 = a.allocate(16 * MiB);
  void* p12 = a.allocate(12 * MiB);
  EXPECT_EQ(backing.alloc_sizes(), (std::vector<size_t>{16 * MiB, 12 * MiB}));
  a.deallocate(p16);
  a.deallocate(p12);
  EXPECT_EQ(a.allocate(11 * MiB), p12);  // leaves 1 MiB: too little to split off in the large pool
  EXPECT_EQ(a.stats().num_splits, 0);
  EXPECT_EQ(a.allocate(14 * MiB), p16);  // leaves 2 MiB: split
  EXPECT_EQ(a.stats().num_splits, 1);
  EXPECT_EQ(a.stats().largest_free_block, static_cast<int64_t>(2 * MiB));
  EXPECT_EQ(a.stats().allocated_bytes, static_cast<int64_t>(25 * MiB));
  EXPECT_EQ(backing.allocs(), 2);
}

TEST(CachingAllocator, SplitsWithoutOverlapAndMergesBackToTheWholeSegment) {
  CountingBackingAllocator backing;
  CachingAllocator a(backing, Device::cpu());
  const std::vector<size_t> sizes = {512, 1000, 4096, 70000, 3000, 100 * KiB, 1, 9000};
  std::map<uintptr_t, size_t> blocks;  // start -> index
  std::vector<void*> ptrs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    ptrs.push_back(a.allocate(sizes[i]));
    std::memset(ptrs[i], static_cast<int>(i + 1), sizes[i]);
    blocks[addr(ptrs[i])] = i;
  }
  ASSERT_EQ(backing.allocs(), 1);
  EXPECT_EQ(a.stats().num_splits, static_cast<int64_t>(sizes.size()));
  // Each block starts where the previous one (in address order) ends: no overlap, no gap.
  uintptr_t end = blocks.begin()->first;
  for (auto& [start, i] : blocks) {
    EXPECT_EQ(start, end) << "block " << i;
    end = start + round512(sizes[i]);
  }
  std::vector<size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  std::vector<bool> freed(sizes.size(), false);
  for (size_t i : order) {
    a.deallocate(ptrs[i]);
    freed[i] = true;
    for (size_t j = 0; j < sizes.size(); ++j) {
      if (freed[j]) continue;
      const auto* bytes = static_cast<const unsigned char*>(ptrs[j]);
      for (size_t k = 0; k < sizes[j]; ++k) ASSERT_EQ(bytes[k], j + 1) << "block " << j << " byte " << k;
    }
  }
  const Stats s = a.stats();
  EXPECT_EQ(s.num_merges, static_cast<int64_t>(sizes.size()));  // n blocks + the tail -> 1 block
  EXPECT_EQ(s.largest_free_block, static_cast<int64_t>(2 * MiB));
  EXPECT_EQ(s.allocated_bytes, 0);
  EXPECT_EQ(s.reserved_bytes, static_cast<int64_t>(2 * MiB));
  EXPECT_EQ(backing.frees(), 0);
  a.empty_cache();
  EXPECT_EQ(backing.frees(), 1);
  EXPECT_EQ(backing.held(), 0u);
  EXPECT_EQ(a.stats().reserved_bytes, 0);
}

TEST(CachingAllocator, EmptyCacheKeepsSegmentsWithLiveBlocks) {
  CountingBackingAllocator backing;
  CachingAllocator a(backing, Device::cpu());
  a.allocate(KiB);                  // small segment, stays live
  void* big = a.allocate(12 * MiB);  // its own 12 MiB segment
  void* mid = a.allocate(2 * MiB);   // a 20 MiB segment
  a.deallocate(big);
  a.deallocate(mid);
  EXPECT_EQ(a.stats().reserved_bytes, static_cast<int64_t>(34 * MiB));
  a.empty_cache();
  EXPECT_EQ(backing.frees(), 2);
  EXPECT_EQ(a.stats().reserved_bytes, static_cast<int64_t>(2 * MiB));
  EXPECT_EQ(a.stats().num_backing_frees, 2);
}

TEST(CachingAllocator, LimitRefusesRequestsBeyondIt) {
  CountingBackingAllocator backing;  // unlimited: only the limit can refuse
  CachingAllocator a(backing, Device::cpu(), Options().limit_bytes(4 * MiB));
  void* p = a.allocate(3 * MiB);
  EXPECT_LE(a.stats().reserved_bytes, static_cast<int64_t>(4 * MiB));
  const std::string msg = oom_message(a, 2 * MiB);
  EXPECT_NE(msg.find(std::to_string(2 * MiB)), std::string::npos) << msg;
  EXPECT_NE(msg.find("limit"), std::string::npos) << msg;
  EXPECT_EQ(a.stats().num_ooms, 1);
  EXPECT_EQ(a.stats().limit_bytes, static_cast<int64_t>(4 * MiB));
  EXPECT_LE(backing.peak_held(), 4 * MiB);
  a.deallocate(p);
  void* q = a.allocate(4 * MiB);  // exactly the limit fits
  a.deallocate(q);
  oom_message(a, 4 * MiB + 1);
  EXPECT_EQ(a.stats().num_ooms, 2);
  EXPECT_LE(backing.peak_held(), 4 * MiB);
}

TEST(CachingAllocator, OomReleasesTheCacheAndRetriesOnce) {
  CountingBackingAllocator backing(24 * MiB);
  CachingAllocator a(backing, Device::cpu());
  a.deallocate(a.allocate(2 * MiB));  // leaves a cached 20 MiB segment
  ASSERT_EQ(backing.held(), 20 * MiB);
  void* q = a.allocate(22 * MiB);  // does not fit beside the cached segment
  EXPECT_EQ(backing.refusals(), 1);
  EXPECT_EQ(backing.frees(), 1);
  EXPECT_EQ(a.stats().num_alloc_retries, 1);
  EXPECT_EQ(a.stats().num_ooms, 0);
  EXPECT_EQ(a.stats().reserved_bytes, static_cast<int64_t>(22 * MiB));

  const int64_t calls = backing.calls();
  const std::string msg = oom_message(a, 30 * MiB);
  EXPECT_EQ(backing.calls() - calls, 2);  // the attempt and one retry
  EXPECT_NE(msg.find(std::to_string(30 * MiB)), std::string::npos) << msg;
  EXPECT_NE(msg.find("reserved"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;
  EXPECT_NE(msg.find("largest free block"), std::string::npos) << msg;
  EXPECT_EQ(a.stats().num_ooms, 1);
  EXPECT_EQ(a.stats().allocated_bytes, static_cast<int64_t>(22 * MiB));
  a.deallocate(q);
  a.deallocate(a.allocate(20 * MiB));  // still usable after an OOM
}

TEST(CachingAllocator, PreAllocateTakesOneChunkAndSendsWhatDoesNotFitToTheBacking) {
  CountingBackingAllocator backing(CountingBackingAllocator::kUnlimited, 64 * MiB);
  CachingAllocator a(backing, Device::cpu(), Options().strategy(Strategy::PreAllocate).memory_fraction(0.5));
  EXPECT_EQ(backing.allocs(), 0);  // nothing before first use
  std::vector<void*> live = {a.allocate(1000)};
  EXPECT_EQ(backing.alloc_sizes(), std::vector<size_t>{32 * MiB});
  for (int i = 0; i < 100; ++i) live.push_back(a.allocate(100 * KiB + i));
  EXPECT_EQ(backing.allocs(), 1);
  EXPECT_EQ(a.stats().num_cache_hits, 100);

  void* huge = a.allocate(40 * MiB);  // larger than the whole chunk
  EXPECT_EQ(backing.alloc_sizes().back(), 40 * MiB);
  a.deallocate(huge);  // a direct segment goes straight back
  EXPECT_EQ(backing.frees(), 1);
  EXPECT_EQ(a.stats().reserved_bytes, static_cast<int64_t>(32 * MiB));

  void* spill = a.allocate(24 * MiB);  // ~10 MiB of the chunk is in use: does not fit
  EXPECT_EQ(backing.alloc_sizes().back(), 24 * MiB);
  EXPECT_EQ(backing.allocs(), 3);
  a.deallocate(spill);
  for (void* p : live) a.deallocate(p);
  EXPECT_EQ(a.stats().largest_free_block, static_cast<int64_t>(32 * MiB));
}

TEST(CachingAllocator, PreAllocateChunkIsCappedByTheLimit) {
  CountingBackingAllocator backing(CountingBackingAllocator::kUnlimited, 64 * MiB);
  CachingAllocator a(backing, Device::cpu(),
                     Options().strategy(Strategy::PreAllocate).memory_fraction(0.5).limit_bytes(8 * MiB));
  void* p = a.allocate(KiB);
  EXPECT_EQ(backing.alloc_sizes(), std::vector<size_t>{8 * MiB});
  oom_message(a, 10 * MiB);
  EXPECT_LE(backing.peak_held(), 8 * MiB);
  a.deallocate(p);
}

TEST(CachingAllocator, NoneStrategyCallsTheBackingEveryTime) {
  CountingBackingAllocator backing;
  CachingAllocator a(backing, Device::cpu(), Options().strategy(Strategy::None));
  for (int round = 0; round < 2; ++round) {
    std::vector<void*> ptrs;
    for (size_t i = 1; i <= 10; ++i) {
      ptrs.push_back(a.allocate(1000 * i));
      EXPECT_EQ(backing.alloc_sizes().back(), round512(1000 * i));
      EXPECT_EQ(a.stats().reserved_bytes, a.stats().allocated_bytes);
    }
    const int64_t frees = backing.frees();
    for (size_t i = 0; i < ptrs.size(); ++i) {
      a.deallocate(ptrs[i]);
      EXPECT_EQ(backing.frees(), frees + static_cast<int64_t>(i) + 1);
    }
  }
  EXPECT_EQ(backing.allocs(), 20);
  const Stats s = a.stats();
  EXPECT_EQ(s.num_cache_hits, 0);
  EXPECT_EQ(s.num_backing_allocs, 20);
  EXPECT_EQ(s.num_allocs, 20);
  EXPECT_EQ(s.reserved_bytes, 0);
  EXPECT_GT(s.peak_reserved_bytes, 0);
}

TEST(CachingAllocator, DeallocateNullUnknownAndTwice) {
  CountingBackingAllocator backing;
  CachingAllocator a(backing, Device::cpu());
  a.deallocate(nullptr);
  EXPECT_EQ(a.stats().num_frees, 0);
  int local = 0;
  EXPECT_THROW(a.deallocate(&local), Error);
  void* p = a.allocate(100);
  a.deallocate(p);
  EXPECT_THROW(a.deallocate(p), Error);
  EXPECT_EQ(a.stats().num_frees, 1);
}

TEST(CachingAllocator, ResetPeakStatsSetsPeaksToCurrent) {
  CountingBackingAllocator backing;
  CachingAllocator a(backing, Device::cpu());
  void* keep = a.allocate(KiB);
  void* big = a.allocate(12 * MiB);
  a.deallocate(big);
  a.empty_cache();
  Stats s = a.stats();
  EXPECT_EQ(s.peak_allocated_bytes, static_cast<int64_t>(12 * MiB + KiB));
  EXPECT_EQ(s.peak_reserved_bytes, static_cast<int64_t>(14 * MiB));
  a.reset_peak_stats();
  s = a.stats();
  EXPECT_EQ(s.peak_allocated_bytes, static_cast<int64_t>(KiB));
  EXPECT_EQ(s.peak_reserved_bytes, static_cast<int64_t>(2 * MiB));
  a.deallocate(keep);
}

TEST(CachingAllocator, DestructorReturnsEverySegment) {
  CountingBackingAllocator backing;
  {
    CachingAllocator a(backing, Device::cpu());
    a.allocate(KiB);
    a.allocate(3 * MiB);
    a.deallocate(a.allocate(50 * MiB));
    EXPECT_EQ(backing.segments(), 3u);
  }
  EXPECT_EQ(backing.held(), 0u);
  EXPECT_EQ(backing.segments(), 0u);
}

TEST(CachingAllocator, OptionsRejectBadValues) {
  EXPECT_THROW(Options().memory_fraction(0.0), Error);
  EXPECT_THROW(Options().memory_fraction(1.5), Error);
  EXPECT_THROW(Options().limit_bytes(-2), Error);
  const Options o = Options().strategy(Strategy::None).memory_fraction(1.0).limit_bytes(0);
  EXPECT_EQ(o.strategy(), Strategy::None);
  EXPECT_EQ(o.memory_fraction(), 1.0);
  EXPECT_EQ(o.limit_bytes(), 0);
}

}  // namespace
}  // namespace mixtrain::memory::testing
