// The optimizer's moments in a checkpoint are finite and its second moments >= 0: a file whose
// state breaks that (checksums refreshed, so only its values tell) is refused naming the file and
// the tensor, with nothing loaded; and a save of such a state is refused before anything is
// written, the previous checkpoint left as it was.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "io/checkpoint_dir.h"
#include "io/file_util.h"
#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
namespace fs = std::filesystem;
using mt::Tensor;
using mt::testing::expect_error;

namespace {

struct AdamRun {
  mt::io::NamedTensors model;
  std::unique_ptr<mt::optim::AdamW> opt;
  mt::amp::GradScaler scaler{mt::amp::GradScalerOptions().enabled(false)};
  explicit AdamRun(uint64_t seed) {
    mt::Generator gen(seed);
    model = {{"0.weight", mt::randn({4, 3}, gen).set_requires_grad(true)},
             {"0.bias", mt::randn({3}, gen).set_requires_grad(true)}};
    opt = std::make_unique<mt::optim::AdamW>(std::vector<Tensor>{model[0].second, model[1].second});
  }
  void steps(int n) {
    for (int i = 0; i < n; ++i) {
      opt->zero_grad();
      (mt::matmul(mt::ones({2, 4}), model[0].second) + model[1].second).pow(2).sum().backward();
      opt->step();
    }
  }
  std::vector<std::vector<uint8_t>> bytes() const {
    std::vector<std::vector<uint8_t>> out;
    for (const auto& [n, t] : model) out.push_back(mt::testing::bytes_of(t));
    for (const auto& [n, t] : opt->state_tensors()) out.push_back(mt::testing::bytes_of(t));
    return out;
  }
};

std::string read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Sets element 0 of `tensor` in optimizer.safetensors to `value` and refreshes the manifest's
// size and CRC-32 of the file, as a careful editor would.
void edit_state(const fs::path& dir, const std::string& tensor, float value) {
  const fs::path file = dir / "optimizer.safetensors";
  mt::io::SafetensorsFile f = mt::io::load_safetensors(file.string());
  bool found = false;
  for (auto& [n, t] : f.tensors)
    if (n == tensor) {
      t.data_ptr<float>()[0] = value;
      found = true;
    }
  ASSERT_TRUE(found) << tensor;
  mt::io::save_safetensors(file.string(), f.tensors, f.metadata);
  const std::string bytes = read_bytes(file);
  nlohmann::json j = nlohmann::json::parse(read_bytes(dir / "trainer.json"));
  j["files"]["optimizer.safetensors"] = {
      {"bytes", bytes.size()},
      {"crc32", mt::io::detail::crc_hex(mt::io::detail::crc32(bytes.data(), bytes.size()))}};
  std::ofstream(dir / "trainer.json", std::ios::binary) << j.dump();
}

}  // namespace

TEST(CheckpointMoments, NonFiniteOrNegativeMomentsAreRefusedNamingTheFileAndTensor) {
  const mt::testing::TempDir tmp;
  AdamRun src(1);
  src.steps(3);
  const fs::path good = fs::path(tmp.path) / "good";
  mt::io::save_checkpoint(good.string(), src.model, *src.opt, src.scaler, 3);
  AdamRun dst(2);
  dst.steps(1);
  const auto before = dst.bytes();
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  struct Case {
    const char* tensor;
    float value;
    std::vector<std::string> expect;
  };
  const std::vector<Case> cases = {
      {"state.0.exp_avg", nan, {"optimizer.safetensors", "\"state.0.exp_avg\"", "must be finite"}},
      {"state.1.exp_avg", inf, {"optimizer.safetensors", "\"state.1.exp_avg\"", "inf"}},
      {"state.0.exp_avg_sq", nan, {"\"state.0.exp_avg_sq\"", "finite and >= 0"}},
      {"state.1.exp_avg_sq", -1e-6f, {"\"state.1.exp_avg_sq\"", "-1e-06", "finite and >= 0"}},
  };
  int k = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.tensor);
    const fs::path d = fs::path(tmp.path) / ("v" + std::to_string(k++));
    fs::copy(good, d);
    ASSERT_NO_FATAL_FAILURE(edit_state(d, c.tensor, c.value));
    expect_error([&] { mt::io::load_checkpoint(d.string(), dst.model, *dst.opt, dst.scaler); }, c.expect);
    EXPECT_EQ(dst.bytes(), before);
  }
  // The unedited checkpoint loads.
  EXPECT_EQ(mt::io::load_checkpoint(good.string(), dst.model, *dst.opt, dst.scaler), 3);
  EXPECT_EQ(dst.bytes(), src.bytes());
}

TEST(CheckpointMoments, ASaveOfNonFiniteStateIsRefusedLeavingThePreviousCheckpoint) {
  const mt::testing::TempDir tmp;
  AdamRun run(3);
  run.steps(2);
  const std::string dir = tmp.path + "/ckpt";
  mt::io::save_checkpoint(dir, run.model, *run.opt, run.scaler, 2);
  const std::string before = read_bytes(fs::path(dir) / "optimizer.safetensors");
  run.steps(1);
  {
    mt::NoGradGuard no_grad;
    for (auto& [n, t] : run.opt->state_tensors())
      if (n == "state.1.exp_avg_sq") Tensor(t).fill_(std::numeric_limits<double>::infinity());
  }
  expect_error([&] { mt::io::save_checkpoint(dir, run.model, *run.opt, run.scaler, 3); },
               {"refusing to write", "\"state.1.exp_avg_sq\"", "inf", "previous checkpoint"});
  EXPECT_EQ(read_bytes(fs::path(dir) / "optimizer.safetensors"), before);
  EXPECT_FALSE(fs::exists(dir + ".mixtrain-tmp"));
  AdamRun fresh(4);
  EXPECT_EQ(mt::io::load_checkpoint(dir, fresh.model, *fresh.opt, fresh.scaler), 2);
}
