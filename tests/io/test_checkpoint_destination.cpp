// check_checkpoint_destination: a program checks where it will save before a long run. It
// accepts what save_checkpoint can write (a new directory, or a previous checkpoint to replace),
// refuses what it cannot (a directory with other files, a path under a regular file), and leaves
// nothing behind.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
namespace fs = std::filesystem;
using mt::testing::expect_error;

namespace {
struct Scratch {
  fs::path path = fs::temp_directory_path() / ("mt_ckpt_dest_" + std::to_string(::getpid()));
  Scratch() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Scratch() { fs::remove_all(path); }
  size_t entries() const { return static_cast<size_t>(std::distance(fs::directory_iterator(path), {})); }
};
}  // namespace

TEST(CheckpointDestination, AcceptsNewDirectoriesAndPreviousCheckpoints) {
  Scratch s;
  mt::io::check_checkpoint_destination((s.path / "ckpt").string());
  mt::io::check_checkpoint_destination((s.path / "not/yet/there/ckpt/").string());
  EXPECT_EQ(s.entries(), 0u);  // nothing created, the probe removed

  mt::Tensor w = mt::randn({3, 2}).set_requires_grad(true);
  mt::optim::SGD opt({w}, mt::optim::SGDOptions(0.1));
  mt::amp::GradScaler scaler;
  const std::string ckpt = (s.path / "ckpt").string();
  mt::io::save_checkpoint(ckpt, mt::io::NamedTensors{{"w", w}}, opt, scaler, 1);
  mt::io::check_checkpoint_destination(ckpt);  // a checkpoint may be replaced
  EXPECT_EQ(s.entries(), 1u);
}

TEST(CheckpointDestination, RefusesWhatSaveCouldNotWrite) {
  Scratch s;
  fs::create_directories(s.path / "mine");
  std::ofstream(s.path / "mine" / "notes.txt") << "keep";
  std::ofstream(s.path / "file") << "x";
  expect_error([&] { mt::io::check_checkpoint_destination((s.path / "mine").string()); },
               {(s.path / "mine").string(), "notes.txt", "refusing to replace"});
  expect_error([&] { mt::io::check_checkpoint_destination((s.path / "file").string()); },
               {(s.path / "file").string(), "not a directory"});
  expect_error([&] { mt::io::check_checkpoint_destination((s.path / "file" / "deeper" / "ckpt").string()); },
               {(s.path / "file").string(), "not a directory"});
  expect_error([&] { mt::io::check_checkpoint_destination(""); }, "empty directory name");

  // save_checkpoint refuses the same directory, touching nothing.
  mt::Tensor w = mt::randn({2}).set_requires_grad(true);
  mt::optim::SGD opt({w}, mt::optim::SGDOptions(0.1));
  mt::amp::GradScaler scaler;
  expect_error([&] { mt::io::save_checkpoint((s.path / "mine").string(), mt::io::NamedTensors{{"w", w}}, opt, scaler, 1); },
               {"save_checkpoint", "notes.txt"});
  EXPECT_EQ(std::distance(fs::directory_iterator(s.path / "mine"), {}), 1);
  EXPECT_EQ(s.entries(), 2u);
}
