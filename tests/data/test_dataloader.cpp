// Samplers and the DataLoader: seeded orders, epochs, drop_last, worker-count independence,
// errors from workers, resuming from a state_dict.
#include <mixtrain/mixtrain.h>

#include <atomic>
#include <numeric>
#include <set>
#include <stdexcept>

#include "support/testing.h"

namespace mt = mixtrain;
namespace data = mixtrain::data;
using mixtrain::testing::expect_error;

namespace {

// Row r holds {r, -r}; its target is r % 3.
data::TensorDataset rows_dataset(int64_t n) {
  std::vector<float> x;
  std::vector<int64_t> y;
  for (int64_t r = 0; r < n; ++r) {
    x.insert(x.end(), {static_cast<float>(r), static_cast<float>(-r)});
    y.push_back(r % 3);
  }
  return data::TensorDataset(mt::from_vector(x, {n, 2}), mt::from_vector(y, {n}));
}

// The rows of a batch, checking that each row's target travelled with it.
std::vector<int64_t> rows_of(const data::Batch& b) {
  EXPECT_EQ(b.data.dtype(), mt::kFloat32);
  EXPECT_EQ(b.target.dtype(), mt::kInt64);
  const auto x = b.data.to_vector<float>();
  const auto y = b.target.to_vector<int64_t>();
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < b.data.size(0); ++i) {
    const auto r = static_cast<int64_t>(x[static_cast<size_t>(2 * i)]);
    EXPECT_EQ(x[static_cast<size_t>(2 * i + 1)], -static_cast<float>(r));
    EXPECT_EQ(y[static_cast<size_t>(i)], r % 3);
    rows.push_back(r);
  }
  return rows;
}

// Every row of `epochs` epochs, with -1 marking each epoch's end.
std::vector<int64_t> stream(data::DataLoader& loader, int epochs) {
  std::vector<int64_t> out;
  for (int e = 0; e < epochs; ++e) {
    data::Batch b;
    while (loader.next(b))
      for (int64_t r : rows_of(b)) out.push_back(r);
    out.push_back(-1);
  }
  return out;
}

// Fisher-Yates with one generator continued across epochs: the order RandomSampler documents.
std::vector<std::vector<int64_t>> reference_epochs(int64_t n, uint64_t seed, int epochs) {
  mt::Generator gen(seed);
  std::vector<std::vector<int64_t>> out;
  for (int e = 0; e < epochs; ++e) {
    std::vector<int64_t> v(static_cast<size_t>(n));
    std::iota(v.begin(), v.end(), 0);
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[gen.next_u64() % i]);
    out.push_back(v);
  }
  return out;
}

}  // namespace

TEST(Samplers, SequentialAndRandomOrders) {
  EXPECT_EQ(data::SequentialSampler(4).epoch_order(3), (std::vector<int64_t>{0, 1, 2, 3}));
  const data::RandomSampler s(10, 42);
  const auto ref = reference_epochs(10, 42, 3);
  for (int e = 2; e >= 0; --e) EXPECT_EQ(s.epoch_order(e), ref[static_cast<size_t>(e)]) << "epoch " << e;
  EXPECT_NE(ref[0], ref[1]) << "each epoch is reshuffled";
  EXPECT_NE(data::RandomSampler(10, 43).epoch_order(0), ref[0]);

  // With replacement: independent draws, epoch e starting at draw e * num_samples.
  const data::RandomSampler r(7, 5, /*replacement=*/true, 20);
  EXPECT_EQ(r.size(), 20);
  mt::Generator gen(5);
  std::vector<int64_t> draws;
  for (int i = 0; i < 40; ++i) draws.push_back(static_cast<int64_t>(gen.next_u64() % 7));
  EXPECT_EQ(r.epoch_order(1), std::vector<int64_t>(draws.begin() + 20, draws.end()));
  EXPECT_EQ(r.epoch_order(0), std::vector<int64_t>(draws.begin(), draws.begin() + 20));

  expect_error([] { (void)data::RandomSampler(0, 1); }, "dataset size must be positive");
  expect_error([] { (void)data::RandomSampler(5, 1, false, 3); }, "without replacement");
}

TEST(Samplers, BatchSamplerEpochsAndState) {
  data::BatchSampler bs(std::make_shared<data::SequentialSampler>(10), 4);
  EXPECT_EQ(bs.batches_per_epoch(), 3);
  std::vector<int64_t> idx;
  std::vector<size_t> sizes;
  while (bs.next(idx)) sizes.push_back(idx.size());
  EXPECT_EQ(sizes, (std::vector<size_t>{4, 4, 2}));
  EXPECT_EQ(bs.position().epoch, 1);
  EXPECT_EQ(bs.position().batch, 0);
  ASSERT_TRUE(bs.next(idx));
  EXPECT_EQ(idx, (std::vector<int64_t>{0, 1, 2, 3}));

  data::BatchSampler dropping(std::make_shared<data::SequentialSampler>(10), 4, /*drop_last=*/true);
  EXPECT_EQ(dropping.batches_per_epoch(), 2);
  expect_error([] { (void)data::BatchSampler(std::make_shared<data::SequentialSampler>(3), 4, true); },
               "an epoch has no batch");
  expect_error([] { (void)data::BatchSampler(std::make_shared<data::SequentialSampler>(3), 0); },
               "batch size must be positive");

  // state_dict round trip, and rejection of another sampler's state without changing anything.
  data::BatchSampler a(std::make_shared<data::RandomSampler>(10, 3), 4), b(std::make_shared<data::RandomSampler>(10, 3), 4);
  for (int i = 0; i < 5; ++i) a.next(idx);
  b.load_state_dict(nlohmann::json::parse(a.state_dict().dump()));
  std::vector<int64_t> ia, ib;
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(a.next(ia), b.next(ib));
    EXPECT_EQ(ia, ib);
  }
  data::BatchSampler other(std::make_shared<data::RandomSampler>(10, 4), 4);
  const auto before = other.position();
  expect_error([&] { other.load_state_dict(a.state_dict()); }, {"sampler state_dict.sampler", "a different order"});
  nlohmann::json bad = a.state_dict();
  bad["batch"] = 4;
  expect_error([&] { b.load_state_dict(bad); }, "batch");
  bad = a.state_dict();
  bad["batch_size"] = 5;
  expect_error([&] { b.load_state_dict(bad); }, "batch_size is 5 but this loader's is 4");
  bad = a.state_dict();
  bad["extra"] = 1;
  expect_error([&] { b.load_state_dict(bad); }, "extra");
  EXPECT_EQ(other.position().epoch, before.epoch);
  EXPECT_EQ(other.position().batch, before.batch);
}

TEST(DataLoader, OrderIsTheSamplersWhateverTheWorkers) {
  const auto ds = rows_dataset(10);
  const auto ref = reference_epochs(10, 42, 3);
  std::vector<int64_t> expected;
  for (const auto& e : ref) {
    expected.insert(expected.end(), e.begin(), e.end());
    expected.push_back(-1);
  }
  for (int64_t workers : {0, 1, 3}) {
    for (int64_t prefetch : {1, 4}) {
      data::DataLoader loader(
          ds, data::DataLoaderOptions().batch_size(4).shuffle(true).seed(42).num_workers(workers).prefetch_factor(prefetch));
      EXPECT_EQ(loader.batches_per_epoch(), 3);
      EXPECT_EQ(stream(loader, 3), expected) << workers << " workers, prefetch " << prefetch;
    }
  }
  // Sequential, drop_last, and the range-for over one epoch.
  data::DataLoader in_order(ds, data::DataLoaderOptions().batch_size(3).drop_last(true).num_workers(2));
  std::vector<int64_t> rows, sizes;
  for (const data::Batch& b : in_order) {
    sizes.push_back(b.data.size(0));
    for (int64_t r : rows_of(b)) rows.push_back(r);
  }
  EXPECT_EQ(rows, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(sizes, (std::vector<int64_t>{3, 3, 3}));
  EXPECT_EQ(in_order.position().epoch, 1);
  // next_batch() runs on across epochs.
  for (int i = 0; i < 7; ++i) EXPECT_EQ(in_order.next_batch().data.size(0), 3);
}

TEST(DataLoader, CustomCollateAndDevice) {
  const auto ds = rows_dataset(6);
  auto sum_rows = [](const std::vector<data::Example>& ex) {
    data::Batch b = data::stack_examples(ex);
    b.data = b.data.sum({0});
    return b;
  };
  data::DataLoader loader(ds, data::DataLoaderOptions().batch_size(3).collate(sum_rows).device(mt::Device::cpu()));
  const data::Batch b = loader.next_batch();
  EXPECT_EQ(b.data.to_vector<float>(), (std::vector<float>{3, -3}));
  EXPECT_EQ(b.target.shape(), (mt::Shape{3}));

  // Examples of different shapes cannot be stacked: the error says what to do.
  expect_error([] { (void)data::stack_examples({{mt::zeros({2}), {}}, {mt::zeros({3}), {}}}); },
               {"example 1", "write a collate function"});
}

namespace {
// Throws for one index; counts gets, to show prefetch is bounded.
class FlakyDataset : public data::Dataset {
 public:
  FlakyDataset(int64_t n, int64_t bad) : rows_(rows_dataset(n)), bad_(bad) {}
  int64_t size() const override { return rows_.size(); }
  data::Example get(int64_t i) const override {
    ++gets;
    if (i == bad_) throw mt::Error("flaky: cannot read example " + std::to_string(i));
    return rows_.get(i);
  }
  mutable std::atomic<int64_t> gets{0};

 private:
  data::TensorDataset rows_;
  int64_t bad_;
};
}  // namespace

TEST(DataLoader, WorkerErrorsReachTheConsumerInOrder) {
  for (int64_t workers : {0, 2}) {
    FlakyDataset ds(12, 5);  // batch 1 (rows 4..7) holds the bad row
    data::DataLoader loader(ds, data::DataLoaderOptions().batch_size(4).num_workers(workers));
    data::Batch b;
    ASSERT_TRUE(loader.next(b));
    EXPECT_EQ(rows_of(b), (std::vector<int64_t>{0, 1, 2, 3}));
    expect_error([&] { loader.next(b); }, "flaky: cannot read example 5");
    ASSERT_TRUE(loader.next(b)) << "the stream goes on after an error";
    EXPECT_EQ(rows_of(b), (std::vector<int64_t>{8, 9, 10, 11}));
    EXPECT_FALSE(loader.next(b));
  }
}

TEST(DataLoader, PrefetchIsBoundedAndDestructionJoins) {
  FlakyDataset ds(1000, -1);
  {
    data::DataLoader loader(ds, data::DataLoaderOptions().batch_size(2).num_workers(2).prefetch_factor(2));
    loader.next_batch();
    // Give the workers time to run ahead as far as they may.
    for (int i = 0; i < 200 && ds.gets.load() < 10; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    // One batch delivered, at most 2 workers x 2 batches in flight beyond it: 5 batches of 2.
    EXPECT_LE(ds.gets.load(), 10);
    EXPECT_GE(ds.gets.load(), 4);
  }  // the destructor stops and joins the workers while they wait for room
  SUCCEED();
}

TEST(DataLoader, ResumesFromStateDictAndSkip) {
  const auto ds = rows_dataset(10);
  const auto opts = data::DataLoaderOptions().batch_size(4).shuffle(true).seed(9).num_workers(2);
  data::DataLoader a(ds, opts);
  for (int i = 0; i < 4; ++i) a.next_batch();  // into the second epoch; workers run ahead
  const nlohmann::json state = a.state_dict();
  EXPECT_EQ(state["epoch"], 1);
  EXPECT_EQ(state["batch"], 1);
  data::DataLoader b(ds, data::DataLoaderOptions(opts).num_workers(0));
  b.load_state_dict(state);
  data::DataLoader c(ds, opts);
  c.skip(4);
  for (int i = 0; i < 8; ++i) {
    const auto ra = rows_of(a.next_batch());
    EXPECT_EQ(rows_of(b.next_batch()), ra) << "batch " << i;
    EXPECT_EQ(rows_of(c.next_batch()), ra) << "batch " << i;
  }
  data::DataLoader other_seed(ds, data::DataLoaderOptions(opts).seed(10));
  expect_error([&] { other_seed.load_state_dict(state); }, "a different order");
}
