// make_data_loader (libtorch's torch::data::make_data_loader): a loader that owns its dataset,
// RandomSampler by default as in libtorch, SequentialSampler on request.
#include <algorithm>

#include "support/testing.h"

namespace mt = mixtrain;
namespace data = mixtrain::data;
using mt::Tensor;

namespace {
std::vector<int64_t> epoch_rows(data::DataLoader& loader) {
  std::vector<int64_t> rows;
  for (const data::Batch& b : loader)
    for (int64_t v : b.target.to_vector<int64_t>()) rows.push_back(v);
  return rows;
}
}  // namespace

TEST(MakeDataLoader, OwnsItsDatasetAndFollowsLibtorchsDefaultSampler) {
  std::unique_ptr<data::DataLoader> loader;  // held as the base: the dataset must go with it
  {
    data::TensorDataset ds(mt::randn({10, 3}), mt::arange(10));
    loader = data::make_data_loader(std::move(ds), data::DataLoaderOptions().batch_size(4).seed(5));
  }  // the dataset object is gone; the loader has its own
  std::vector<int64_t> rows = epoch_rows(*loader);
  ASSERT_EQ(rows.size(), 10u);
  EXPECT_NE(rows, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));  // shuffled, as libtorch's RandomSampler
  std::sort(rows.begin(), rows.end());
  EXPECT_EQ(rows, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));  // each row once
  EXPECT_EQ(loader->batches_per_epoch(), 3);

  auto sequential = data::make_data_loader<data::SequentialSampler>(data::TensorDataset(mt::zeros({5, 1}), mt::arange(5)), 2);
  EXPECT_EQ(epoch_rows(*sequential), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(sequential->dataset().size(), 5);

  auto with_workers = data::make_data_loader<data::SequentialSampler>(
      data::TensorDataset(mt::zeros({6, 1}), mt::arange(6)), data::DataLoaderOptions().batch_size(4).num_workers(2));
  EXPECT_EQ(epoch_rows(*with_workers), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));

  auto own = data::make_data_loader(data::TensorDataset(mt::zeros({4, 1}), mt::arange(4)),
                                    std::make_shared<data::SequentialSampler>(4), data::DataLoaderOptions().batch_size(3));
  EXPECT_EQ(epoch_rows(*own), (std::vector<int64_t>{0, 1, 2, 3}));
}
