// Checkpoint parts: a scheduler's and a data loader's state saved in trainer.json and restored
// with the rest; a checkpoint without them, or with another loader's state, is rejected with
// nothing loaded.
#include <unistd.h>

#include <filesystem>

#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
namespace fs = std::filesystem;
using mt::Tensor;
using mt::testing::expect_error;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "mt_ckpt_parts_XXXXXX").string();
    path = ::mkdtemp(t.data());
  }
  ~TempDir() { fs::remove_all(path); }
};

struct Session {
  mt::data::TensorDataset ds{mt::arange(0.0, 20.0, 1.0).reshape({20, 1}), mt::arange(0.0, 20.0, 1.0)};
  mt::io::NamedTensors model{{"w", mt::ones({1}).set_requires_grad(true)}};
  mt::optim::SGD opt{std::vector<Tensor>{model[0].second}, mt::optim::SGDOptions(0.1)};
  mt::amp::GradScaler scaler{mt::amp::GradScalerOptions().enabled(false)};
  mt::optim::CosineAnnealingLR sched{opt, 10};
  mt::data::DataLoader loader;
  explicit Session(uint64_t seed)
      : loader(ds, mt::data::DataLoaderOptions().batch_size(3).shuffle(true).seed(seed).num_workers(2)) {}
  std::vector<float> next_rows() { return loader.next_batch().data.reshape({-1}).to_vector<float>(); }
};

}  // namespace

TEST(CheckpointParts, SchedulerAndLoaderResume) {
  TempDir tmp;
  const std::string dir = (tmp.path / "ckpt").string();
  Session a(7);
  for (int i = 0; i < 9; ++i) {  // past the first epoch of 7 batches
    a.next_rows();
    a.sched.step(true);
  }
  mt::io::save_checkpoint(dir, a.model, a.opt, a.scaler, 9, nlohmann::json::object(), {&a.sched, &a.loader});

  Session b(7);
  EXPECT_EQ(mt::io::load_checkpoint(dir, b.model, b.opt, b.scaler, nullptr, {&b.sched, &b.loader}), 9);
  EXPECT_EQ(b.sched.last_epoch(), 9);
  EXPECT_EQ(b.opt.param_groups()[0].options().get_lr(), a.opt.param_groups()[0].options().get_lr());
  EXPECT_EQ(b.loader.position().epoch, 1);
  EXPECT_EQ(b.loader.position().batch, 2);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(b.next_rows(), a.next_rows()) << "batch " << i;

  // Without parts the same checkpoint loads as before.
  Session plain(7);
  EXPECT_EQ(mt::io::load_checkpoint(dir, plain.model, plain.opt, plain.scaler), 9);

  // Another seed's loader: rejected, and nothing (not the model, not the scheduler) changes.
  Session other(8);
  other.model[0].second.detach().fill_(5.0);
  expect_error([&] { mt::io::load_checkpoint(dir, other.model, other.opt, other.scaler, nullptr, {&other.sched, &other.loader}); },
               "a different order");
  EXPECT_EQ(other.model[0].second.item<float>(), 5.0f);
  EXPECT_EQ(other.sched.last_epoch(), 0);

  // A checkpoint saved without a loader cannot restore one.
  const std::string bare = (tmp.path / "bare").string();
  mt::io::save_checkpoint(bare, a.model, a.opt, a.scaler, 9);
  Session c(7);
  expect_error([&] { mt::io::load_checkpoint(bare, c.model, c.opt, c.scaler, nullptr, {nullptr, &c.loader}); },
               {"has no \"data\" entry", "saved without one"});
}
