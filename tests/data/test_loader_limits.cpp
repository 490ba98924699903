// The DataLoader and BatchSampler at the ends of their ranges: skip is arithmetic (never a loop
// per batch), a refused skip or an epoch that would pass 2^63 - 1 changes nothing and leaves a
// loader that destroys cleanly, and options that cannot be honoured are Errors at construction.
#include <limits>

#include <mixtrain/mixtrain.h>

#include "support/testing.h"

namespace mt = mixtrain;
namespace data = mixtrain::data;
using mixtrain::testing::expect_error;

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

data::TensorDataset rows(int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) x[static_cast<size_t>(r)] = static_cast<float>(r);
  return data::TensorDataset(mt::from_vector(x, {n, 1}), mt::from_vector(x, {n}));
}

void expect_position(const data::DataLoader& l, int64_t epoch, int64_t batch) {
  EXPECT_EQ(l.position().epoch, epoch);
  EXPECT_EQ(l.position().batch, batch);
}

}  // namespace

TEST(LoaderLimits, SkipIsArithmeticAcrossEpochs) {
  const auto ds = rows(10);
  for (int64_t workers : {0, 2}) {
    SCOPED_TRACE(workers);
    // One batch per epoch: skip(1e15) once took a loop turn per epoch.
    data::DataLoader one(ds, data::DataLoaderOptions().batch_size(10).num_workers(workers));
    one.skip(1000000000000000);
    expect_position(one, 999999999999999, 1);  // as 1e15 calls of next_batch() leave it
    // Three batches per epoch (4, 4, 2): the same positions n calls of next_batch() reach.
    data::DataLoader a(ds, data::DataLoaderOptions().batch_size(4).num_workers(workers));
    data::DataLoader b(ds, data::DataLoaderOptions().batch_size(4).num_workers(workers));
    a.next_batch();
    b.next_batch();
    for (int64_t n : {0, 1, 2, 3, 4, 7}) {
      a.skip(n);
      for (int64_t i = 0; i < n; ++i) b.next_batch();
      EXPECT_EQ(a.position().epoch, b.position().epoch) << n;
      EXPECT_EQ(a.position().batch, b.position().batch) << n;
      EXPECT_EQ(a.next_batch().data.to_vector<float>(), b.next_batch().data.to_vector<float>()) << n;
    }
  }
}

TEST(LoaderLimits, RefusedSkipChangesNothingAndDestroysCleanly) {
  const auto ds = rows(10);
  for (int64_t workers : {0, 2}) {
    SCOPED_TRACE(workers);
    data::DataLoader l(ds, data::DataLoaderOptions().batch_size(4).num_workers(workers));
    l.next_batch();
    // skip(2^63 - 1) from batch 1 once overflowed the batch count; it is as many next_batch()
    // calls: 1 + 2^63 - 1 batches of 3 per epoch (each epoch's position ends at batch 1..3).
    l.skip(kMax);
    const __int128 total = static_cast<__int128>(kMax) + 1;
    expect_position(l, static_cast<int64_t>((total - 1) / 3), static_cast<int64_t>(total - (total - 1) / 3 * 3));
    // One batch per epoch: from (2^63 - 1, 1) a single batch more passes the last epoch. An
    // Error, and the position of before (it once became INT64_MIN, and the destructor then
    // aborted the process).
    data::DataLoader one(ds, data::DataLoaderOptions().batch_size(10).num_workers(workers));
    one.next_batch();
    one.skip(kMax);
    expect_position(one, kMax, 1);
    expect_error([&] { one.skip(1); }, {"DataLoader::skip", "2^63"});
    expect_position(one, kMax, 1);
    const data::SamplerPosition at = l.position();
    expect_error([&] { l.skip(-1); }, "n must be >= 0");
    expect_position(l, at.epoch, at.batch);
    nlohmann::json state = l.state_dict();
    state["epoch"] = 0;
    state["batch"] = 1;
    l.load_state_dict(state);
    EXPECT_EQ(l.next_batch().data.to_vector<float>(), (std::vector<float>{4, 5, 6, 7}));
  }
}

TEST(LoaderLimits, TheLastEpochEndsInAnErrorNotAWrap) {
  const auto ds = rows(10);
  for (int64_t workers : {0, 2}) {
    SCOPED_TRACE(workers);
    data::DataLoader l(ds, data::DataLoaderOptions().batch_size(10).num_workers(workers));
    nlohmann::json state = l.state_dict();
    state["epoch"] = kMax;
    l.load_state_dict(state);
    data::Batch b;
    ASSERT_TRUE(l.next(b));
    EXPECT_EQ(b.data.size(0), 10);
    // The epoch's end would need epoch 2^63: refused, every time, with the position kept.
    for (int i = 0; i < 2; ++i) expect_error([&] { l.next(b); }, {"epoch", "9223372036854775807", "2^63"});
    expect_position(l, kMax, 1);
    // Moving back is still possible.
    state["epoch"] = 3;
    l.load_state_dict(state);
    EXPECT_TRUE(l.next(b));
  }
  data::BatchSampler s(std::make_shared<data::SequentialSampler>(10), 10);
  s.set_position({kMax, 1});
  std::vector<int64_t> idx;
  expect_error([&] { s.next(idx); }, "2^63");
  EXPECT_EQ(s.position().epoch, kMax);
}

TEST(LoaderLimits, OptionsThatCannotBeHonouredAreErrors) {
  const auto ds = rows(10);
  // A batch larger than the dataset is one batch per epoch, as in PyTorch (its message once
  // blamed drop_last, from a wrapped batch count).
  data::DataLoader huge(ds, data::DataLoaderOptions().batch_size(kMax));
  EXPECT_EQ(huge.batches_per_epoch(), 1);
  EXPECT_EQ(huge.next_batch().data.size(0), 10);
  expect_error([&] { data::DataLoader(ds, data::DataLoaderOptions().batch_size(kMax).drop_last(true)); },
               {"drop_last", "no batch"});
  data::BatchSampler big(std::make_shared<data::SequentialSampler>(kMax), kMax - 1);
  EXPECT_EQ(big.batches_per_epoch(), 2);
  // Threads that cannot be started were a std::system_error on the first batch.
  expect_error([&] { data::DataLoader(ds, data::DataLoaderOptions().num_workers(1000000)); },
               {"num_workers", "1000000"});
  expect_error([&] { data::DataLoader(ds, data::DataLoaderOptions().num_workers(2).prefetch_factor(kMax)); },
               "prefetch_factor");
}
