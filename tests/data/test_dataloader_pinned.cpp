// DataLoader's pin_memory option: where pinned memory cannot be had it warns once and delivers
// ordinary batches (PyTorch's behaviour); with a stand-in pinned allocator (host memory installed
// with memory::set_pinned_allocator, so this runs without a GPU) workers collate into pinned
// tensors, default and custom collate alike, with the same values as an unpinned loader.
#include <mixtrain/mixtrain.h>

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "mixtrain/memory/allocator.h"
#include "mixtrain/memory/caching_allocator.h"
#include "support/testing.h"

namespace mt = mixtrain;
namespace data = mixtrain::data;

namespace {

// Row r holds {r, -r} (float16, to see dtypes kept); its target is r % 3.
data::TensorDataset half_rows(int64_t n) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t r = 0; r < n; ++r) {
    x.insert(x.end(), {static_cast<float>(r), static_cast<float>(-r)});
    y.push_back(r % 3);
  }
  return data::TensorDataset(mt::from_vector(x, {n, 2}).to(mt::kFloat16), mt::from_vector(y, {n}));
}

std::vector<double> values(const mt::Tensor& t) { return mt::testing::to_doubles(t); }

TEST(DataLoaderPinned, WithoutPinnedMemoryWarnsAndDeliversUnpinnedBatches) {
  const std::string why = mt::memory::pinned_memory_unavailable_reason();
  if (why.empty()) GTEST_SKIP() << "pinned memory is available here (CUDA backend and a device)";
  const auto ds = half_rows(10);
  ::testing::internal::CaptureStderr();
  data::DataLoader loader(ds, data::DataLoaderOptions().batch_size(4).num_workers(2).pin_memory(true));
  const std::string warning = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(warning.find("pin_memory(true) ignored"), std::string::npos) << warning;
  EXPECT_NE(warning.find(why), std::string::npos) << warning;
  EXPECT_FALSE(loader.pins_memory());
  data::DataLoader plain(ds, data::DataLoaderOptions().batch_size(4));
  for (int i = 0; i < 3; ++i) {
    const data::Batch b = loader.next_batch(), want = plain.next_batch();
    EXPECT_FALSE(b.data.is_pinned());
    EXPECT_EQ(values(b.data), values(want.data)) << "batch " << i;
    EXPECT_EQ(values(b.target), values(want.target)) << "batch " << i;
  }
}

TEST(DataLoaderPinned, OffByDefaultAndSilent) {
  const auto ds = half_rows(4);
  ::testing::internal::CaptureStderr();
  data::DataLoader loader(ds, data::DataLoaderOptions().batch_size(2));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_FALSE(loader.pins_memory());
  EXPECT_FALSE(loader.next_batch().data.is_pinned());
}

class StandInPinnedLoader : public ::testing::Test {
 protected:
  void SetUp() override { mt::memory::set_pinned_allocator(allocator_.get()); }
  void TearDown() override { mt::memory::set_pinned_allocator(nullptr); }

  mt::memory::SystemBackingAllocator backing_;
  std::unique_ptr<mt::memory::CachingAllocator> allocator_ =
      std::make_unique<mt::memory::CachingAllocator>(backing_, mt::Device::cpu());
};

TEST_F(StandInPinnedLoader, WorkersCollateIntoPinnedTensors) {
  const auto ds = half_rows(11);
  for (int64_t workers : {0, 2}) {
    SCOPED_TRACE("num_workers " + std::to_string(workers));
    data::DataLoader pinned(ds, data::DataLoaderOptions().batch_size(4).num_workers(workers).pin_memory(true));
    data::DataLoader plain(ds, data::DataLoaderOptions().batch_size(4));
    ASSERT_TRUE(pinned.pins_memory());
    data::Batch b, want;
    int batches = 0;
    while (pinned.next(b)) {
      ASSERT_TRUE(plain.next(want));
      EXPECT_TRUE(b.data.is_pinned());
      EXPECT_TRUE(b.target.is_pinned());
      EXPECT_EQ(b.data.dtype(), mt::kFloat16);
      EXPECT_EQ(b.data.shape(), want.data.shape());
      EXPECT_EQ(values(b.data), values(want.data)) << "batch " << batches;
      EXPECT_EQ(values(b.target), values(want.target)) << "batch " << batches;
      ++batches;
    }
    EXPECT_EQ(batches, 3);  // 4 + 4 + 3
  }
  EXPECT_GT(allocator_->stats().num_allocs, 0);
}

TEST_F(StandInPinnedLoader, CustomCollateResultsArePinnedToo) {
  const auto ds = half_rows(6);
  auto sum_rows = [](const std::vector<data::Example>& ex) {
    data::Batch b = data::stack_examples(ex);
    b.data = b.data.to(mt::kFloat32).sum({0});
    return b;
  };
  data::DataLoader loader(ds, data::DataLoaderOptions().batch_size(3).num_workers(1).collate(sum_rows).pin_memory(true));
  const data::Batch b = loader.next_batch();
  EXPECT_TRUE(b.data.is_pinned());
  EXPECT_TRUE(b.target.is_pinned());
  EXPECT_EQ(b.data.to_vector<float>(), (std::vector<float>{3, -3}));
  EXPECT_EQ(b.target.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2}));
}

TEST_F(StandInPinnedLoader, StackExamplesPinnedChecksLikeStackExamples) {
  mt::testing::expect_error(
      [] { (void)data::stack_examples_pinned({{mt::zeros({2}), {}}, {mt::zeros({3}), {}}}); },
      {"example 1", "write a collate function"});
  const data::Batch b = data::stack_examples_pinned({{mt::ones({2}), {}}, {mt::zeros({2}), {}}});
  EXPECT_TRUE(b.data.is_pinned());
  EXPECT_FALSE(b.target.defined());
  EXPECT_EQ(b.data.to_vector<float>(), (std::vector<float>{1, 1, 0, 0}));
}

}  // namespace
