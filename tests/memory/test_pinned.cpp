// Pinned host memory without a GPU: the errors where it cannot be had, and, with a stand-in
// pinned allocator (host memory from a counting backing, installed with set_pinned_allocator),
// the tensor side: values, is_pinned, views, freeing back to the pinned cache, to(..., copy).
#include <mixtrain/mixtrain.h>

#include <gtest/gtest.h>

#include <memory>

#include "memory/counting_backing.h"
#include "mixtrain/memory/allocator.h"
#include "mixtrain/memory/caching_allocator.h"
#include "support/testing.h"

namespace mixtrain::memory::testing {
namespace {

using mixtrain::testing::expect_error;

// Serves pinned requests from ordinary host memory so the bookkeeping can be checked on a CPU.
class StandInPinned : public ::testing::Test {
 protected:
  void SetUp() override { set_pinned_allocator(allocator_.get()); }
  void TearDown() override { set_pinned_allocator(nullptr); }

  CountingBackingAllocator backing_;
  std::unique_ptr<CachingAllocator> allocator_ = std::make_unique<CachingAllocator>(backing_, Device::cpu());
};

TEST(PinnedUnavailable, PinMemoryNamesTheTensorAndTheReason) {
  const std::string why = pinned_memory_unavailable_reason();
  if (why.empty()) GTEST_SKIP() << "pinned memory is available here (CUDA backend and a device)";
  const Tensor x = ones({2, 3});
  expect_error([&] { (void)x.pin_memory(); }, {"pin_memory", "[2, 3]", "float32", why});
  expect_error([&] { (void)Tensor::empty({4}, TensorOptions().pinned_memory(true)); },
               {"pinned_memory", "16 bytes of pinned host memory", why});
  expect_error([] { (void)pinned_stats(); }, why);
#ifndef MIXTRAIN_WITH_CUDA
  EXPECT_NE(why.find("without"), std::string::npos) << why;
  EXPECT_NE(why.find("MIXTRAIN_CUDA=ON"), std::string::npos) << why;
#endif
}

TEST(PinnedUnavailable, OnlyCpuTensorsArePinned) {
  expect_error([] { (void)Tensor::empty({2}, TensorOptions().device(Device::meta()).pinned_memory(true)); },
               {"pinned_memory(true)", "CPU", "meta"});
  const Tensor m = Tensor::empty({2, 5}, TensorOptions().device(Device::meta()));
  expect_error([&] { (void)m.pin_memory(); }, {"pin_memory", "only CPU", "[2, 5]", "meta"});
}

TEST(PinnedUnavailable, OrdinaryTensorsAreNotPinned) {
  const Tensor x = ones({3});
  EXPECT_FALSE(x.is_pinned());
  EXPECT_FALSE(x.to(Device::cpu(), kFloat64).is_pinned());
}

TEST_F(StandInPinned, PinMemoryCopiesValuesIntoThePinnedAllocator) {
  const Tensor x = mixtrain::testing::random_tensor({5, 7}, kFloat32, 1);
  const Stats cpu_before = stats(Device::cpu());
  const Tensor p = x.pin_memory();
  EXPECT_EQ(stats(Device::cpu()).num_allocs, cpu_before.num_allocs);  // nothing from the pageable cache
  EXPECT_TRUE(p.is_pinned());
  EXPECT_FALSE(x.is_pinned());
  EXPECT_NE(p.raw_data(), x.raw_data());
  EXPECT_EQ(p.shape(), x.shape());
  EXPECT_EQ(p.to_vector<float>(), x.to_vector<float>());
  EXPECT_TRUE(p.is_contiguous());
  const Stats s = allocator_->stats();
  EXPECT_EQ(s.num_allocs, 1);
  EXPECT_GE(s.allocated_bytes, static_cast<int64_t>(p.nbytes()));
  EXPECT_EQ(pinned_stats().num_allocs, 1);  // the installed allocator answers pinned_stats
  // Pinning a pinned tensor is a no-op, as in libtorch.
  EXPECT_TRUE(p.pin_memory().is_same(p));
}

TEST_F(StandInPinned, NonContiguousAndNarrowDTypesPinAsContiguousCopies) {
  const Tensor x = mixtrain::testing::random_tensor({4, 6}, kFloat16, 2).t();
  ASSERT_FALSE(x.is_contiguous());
  const Tensor p = x.pin_memory();
  EXPECT_TRUE(p.is_pinned());
  EXPECT_TRUE(p.is_contiguous());
  EXPECT_EQ(p.dtype(), kFloat16);
  EXPECT_EQ(mixtrain::testing::to_doubles(p), mixtrain::testing::to_doubles(x));
}

TEST_F(StandInPinned, ViewsArePinnedAndLikeTensorsAreNot) {
  const Tensor p = Tensor::empty({4, 4}, TensorOptions().pinned_memory(true));
  EXPECT_TRUE(p.is_pinned());
  EXPECT_TRUE(p.select(0, 1).is_pinned());
  EXPECT_TRUE(p.t().is_pinned());
  EXPECT_FALSE(p.options().pinned_memory());  // a factory option, not a property passed on
  EXPECT_FALSE(Tensor::empty(p.shape(), p.options()).is_pinned());
  EXPECT_FALSE(p.clone().is_pinned());
}

TEST_F(StandInPinned, FreedBlocksReturnToThePinnedCacheAndAreReused) {
  {
    const Tensor p = Tensor::empty({1000}, TensorOptions().pinned_memory(true));
    EXPECT_GT(allocator_->stats().allocated_bytes, 0);
  }
  Stats s = allocator_->stats();
  EXPECT_EQ(s.allocated_bytes, 0);
  EXPECT_EQ(s.num_frees, 1);
  EXPECT_EQ(s.num_backing_allocs, 1);
  EXPECT_GT(s.reserved_bytes, 0);  // cached, not returned to the backing
  const Tensor again = Tensor::empty({1000}, TensorOptions().pinned_memory(true));
  s = allocator_->stats();
  EXPECT_EQ(s.num_backing_allocs, 1);
  EXPECT_EQ(s.num_cache_hits, 1);
  EXPECT_EQ(backing_.calls(), 1);
}

TEST_F(StandInPinned, ToKeepsOrCopiesAsAsked) {
  const Tensor p = mixtrain::testing::random_tensor({3, 3}, kFloat32, 3).pin_memory();
  EXPECT_TRUE(p.to(Device::cpu()).is_same(p));
  EXPECT_TRUE(p.to(Device::cpu(), /*non_blocking=*/true).is_same(p));
  const Tensor copied = p.to(Device::cpu(), /*non_blocking=*/false, /*copy=*/true);
  EXPECT_FALSE(copied.is_same(p));
  EXPECT_NE(copied.raw_data(), p.raw_data());
  EXPECT_EQ(copied.to_vector<float>(), p.to_vector<float>());
  const Tensor d = p.to(Device::cpu(), kFloat64, /*non_blocking=*/true);
  EXPECT_EQ(d.dtype(), kFloat64);
  EXPECT_EQ(mixtrain::testing::to_doubles(d), mixtrain::testing::to_doubles(p));
  EXPECT_FALSE(p.to(Device::cpu(), kFloat32, false, /*copy=*/true).is_same(p));
}

TEST_F(StandInPinned, PinMemoryPassesGradientsThrough) {
  Tensor x = ones({2, 2}).requires_grad_();
  const Tensor p = x.pin_memory();
  EXPECT_TRUE(p.requires_grad());
  (p * 3.0).sum().backward();
  EXPECT_EQ(x.grad().to_vector<float>(), std::vector<float>(4, 3.0f));
}

}  // namespace
}  // namespace mixtrain::memory::testing
