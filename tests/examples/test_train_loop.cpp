// The shared training loop's checkpoint options: save_every writes every N steps as well as at
// the end, and a destination that cannot be written fails before the first step.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "mlp/mlp_trainer.h"
#include "support/testing.h"

namespace ex = mixtrain::examples;
namespace fs = std::filesystem;

namespace {

ex::MlpConfig tiny_mlp() {
  ex::MlpConfig c;
  c.task = ex::MlpTask::Synthetic;
  c.synthetic_samples = 256;
  c.hidden = {8};
  c.batch_size = 16;
  c.device = mixtrain::Device::cpu();
  return c;
}

int64_t saved_step(const fs::path& dir) {
  std::ifstream in(dir / "trainer.json");
  if (!in) return -1;
  return nlohmann::json::parse(in)["step"].get<int64_t>();
}

}  // namespace

TEST(TrainLoop, SaveEverySavesAtMultiplesAndAtTheEnd) {
  const fs::path dir = fs::temp_directory_path() / ("mt_save_every_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const auto task = ex::make_mlp_task(tiny_mlp());
  ex::TrainOptions o;
  o.device = mixtrain::Device::cpu();
  o.steps = 7;
  o.save_dir = (dir / "ckpt").string();
  o.save_every = 3;
  std::vector<int64_t> seen;  // the checkpoint's step when each step begins its report
  ex::train(*task, o, [&](const ex::StepRecord&) { seen.push_back(saved_step(dir / "ckpt")); });
  // Step s reports before its own save: saves after steps 3 and 6, then the last (7).
  EXPECT_EQ(seen, (std::vector<int64_t>{-1, -1, -1, 3, 3, 3, 6}));
  EXPECT_EQ(saved_step(dir / "ckpt"), 7);
  fs::remove_all(dir);
}

TEST(TrainLoop, UnwritableDestinationFailsBeforeTheFirstStep) {
  const fs::path file = fs::temp_directory_path() / ("mt_not_a_dir_" + std::to_string(::getpid()));
  std::ofstream(file) << "x";
  const auto task = ex::make_mlp_task(tiny_mlp());
  ex::TrainOptions o;
  o.device = mixtrain::Device::cpu();
  o.steps = 5;
  o.save_dir = (file / "ckpt").string();
  int steps = 0;
  mixtrain::testing::expect_error([&] { ex::train(*task, o, [&](const ex::StepRecord&) { ++steps; }); },
                                  {file.string(), "not a directory"});
  EXPECT_EQ(steps, 0);
  o.save_dir.clear();
  o.save_every = -1;
  mixtrain::testing::expect_error([&] { ex::train(*task, o); }, "save_every");
  fs::remove(file);
}
