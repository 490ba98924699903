// FP8 state in checkpoints: a run of 2N steps and a run of N steps, checkpointed, resumed into
// fresh objects and run N more, end bit for bit alike (weights, optimizer state, FP8 scales,
// inverse scales and amax histories, losses); a checkpoint whose FP8 state does not fit the run,
// or holds impossible values, is rejected with nothing loaded.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
namespace fs = std::filesystem;
using mt::Tensor;
using mt::testing::bytes_of;
using mt::testing::expect_error;
using mt::testing::random_tensor;

namespace {

constexpr int kN = 10;

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "mt_fp8ckpt_XXXXXX").string();
    path = ::mkdtemp(t.data());
  }
  ~TempDir() { fs::remove_all(path); }
};

// A small MLP trained in FP8 (delayed scaling, HYBRID, a history shorter than the run so it
// wraps), AdamW, a disabled GradScaler (as the trainers run fp8).
struct Fp8Run {
  mt::nn::Sequential model;
  std::unique_ptr<mt::optim::AdamW> opt;
  std::unique_ptr<mt::amp::GradScaler> scaler;
  std::unique_ptr<mt::amp::Fp8Scaling> fp8;
  mt::amp::Fp8Recipe recipe;

  explicit Fp8Run(uint64_t seed, int margin = 0) {
    mt::manual_seed(seed);
    model = mt::nn::Sequential(mt::nn::Linear(32, 64), mt::nn::GELU(), mt::nn::Linear(64, 32), mt::nn::ReLU(),
                               mt::nn::Linear(32, 16));
    recipe = mt::amp::Fp8Recipe().history_len(4).margin(margin);
    fp8 = std::make_unique<mt::amp::Fp8Scaling>(model, recipe);
    opt = std::make_unique<mt::optim::AdamW>(model->parameters(), mt::optim::AdamWOptions(3e-3));
    scaler = std::make_unique<mt::amp::GradScaler>(mt::amp::GradScalerOptions().enabled(false));
  }

  float step(int i) {
    const Tensor x = random_tensor({24, 32}, mt::kFloat32, 1000 + static_cast<uint64_t>(i), -4, 4);
    const Tensor y = random_tensor({24, 16}, mt::kFloat32, 2000 + static_cast<uint64_t>(i));
    opt->zero_grad();
    Tensor loss;
    {
      mt::amp::Fp8AutocastGuard scope(mt::DeviceType::CPU, recipe);
      loss = mt::nn::functional::mse_loss(model->forward(x), y);
    }
    scaler->scale(loss).backward();
    scaler->step(*opt);
    scaler->update();
    fp8->update();
    return loss.item<float>();
  }

  std::vector<std::vector<uint8_t>> state_bytes() const {
    std::vector<std::vector<uint8_t>> out;
    for (const auto& [n, t] : model->state_dict()) out.push_back(bytes_of(t));
    for (const auto& [n, t] : opt->state_tensors()) out.push_back(bytes_of(t));
    return out;
  }
};

}  // namespace

TEST(CheckpointFp8, ResumeIsBitExact) {
  TempDir tmp;
  Fp8Run straight(7);
  std::vector<float> losses;
  for (int i = 0; i < 2 * kN; ++i) losses.push_back(straight.step(i));

  Fp8Run first(7);
  for (int i = 0; i < kN; ++i) ASSERT_EQ(first.step(i), losses[static_cast<size_t>(i)]);
  const std::string dir = (tmp.path / "ckpt").string();
  mt::io::save_checkpoint(dir, *first.model, *first.opt, *first.scaler, kN, nlohmann::json::object(),
                          {nullptr, nullptr, first.fp8.get()});
  Fp8Run resumed(99);  // other weights; its FP8 state starts fresh (scales 1)
  mt::io::CheckpointParts parts;
  parts.fp8 = resumed.fp8.get();
  EXPECT_EQ(mt::io::load_checkpoint(dir, *resumed.model, *resumed.opt, *resumed.scaler, nullptr, parts), kN);
  EXPECT_EQ(resumed.state_bytes(), first.state_bytes());
  EXPECT_EQ(resumed.fp8->state_dict(), first.fp8->state_dict());
  for (int i = kN; i < 2 * kN; ++i) {
    const float l = resumed.step(i);
    EXPECT_EQ(std::memcmp(&l, &losses[static_cast<size_t>(i)], sizeof l), 0) << "step " << i;
  }
  EXPECT_EQ(resumed.state_bytes(), straight.state_bytes());
  EXPECT_EQ(resumed.fp8->updates(), 2 * kN);
  // The scales moved off their initial 1: the resumed run used the checkpoint's, not fresh ones.
  const auto sd = resumed.model->state_dict();
  EXPECT_NE(mt::testing::to_doubles(sd.at("0.fp8_scale"))[0], 1.0);
}

TEST(CheckpointFp8, MismatchedOrImpossibleFp8StateIsRejectedWithNothingLoaded) {
  TempDir tmp;
  Fp8Run a(3);
  for (int i = 0; i < 3; ++i) a.step(i);
  const std::string dir = (tmp.path / "ckpt").string();
  mt::io::save_checkpoint(dir, *a.model, *a.opt, *a.scaler, 3, nlohmann::json::object(), {nullptr, nullptr, a.fp8.get()});

  // Another margin: the recipe must be the checkpoint's.
  Fp8Run b(4, /*margin=*/1);
  const auto before = b.state_bytes();
  mt::io::CheckpointParts parts;
  parts.fp8 = b.fp8.get();
  expect_error([&] { mt::io::load_checkpoint(dir, *b.model, *b.opt, *b.scaler, nullptr, parts); },
               {"fp8.recipe.margin", "0", "1"});
  EXPECT_EQ(b.state_bytes(), before);
  EXPECT_EQ(b.fp8->updates(), 0);

  // Saved without its FP8 part: asking for one is an Error.
  const std::string plain = (tmp.path / "plain").string();
  mt::io::save_checkpoint(plain, *a.model, *a.opt, *a.scaler, 3);
  Fp8Run c(5);
  mt::io::CheckpointParts c_parts;
  c_parts.fp8 = c.fp8.get();
  expect_error([&] { mt::io::load_checkpoint(plain, *c.model, *c.opt, *c.scaler, nullptr, c_parts); },
               {"\"fp8\"", "amp::Fp8Scaling"});

  // A zero scale in model.safetensors (saved without the FP8 check, the FP8 JSON added to the
  // manifest afterwards): the loader reads the state ahead and refuses it.
  Fp8Run d(6);
  for (int i = 0; i < 2; ++i) d.step(i);
  {
    mt::NoGradGuard no_grad;
    d.model->state_dict().at("2.fp8_scale").fill_(0.0);
  }
  const std::string broken = (tmp.path / "broken").string();
  mt::io::save_checkpoint(broken, *d.model, *d.opt, *d.scaler, 2);
  nlohmann::json manifest;
  std::ifstream(fs::path(broken) / "trainer.json") >> manifest;
  manifest["fp8"] = d.fp8->state_dict();
  std::ofstream(fs::path(broken) / "trainer.json") << manifest.dump(2);
  Fp8Run e(8);
  const auto e_before = e.state_bytes();
  mt::io::CheckpointParts e_parts;
  e_parts.fp8 = e.fp8.get();
  expect_error([&] { mt::io::load_checkpoint(broken, *e.model, *e.opt, *e.scaler, nullptr, e_parts); },
               {"2.fp8_scale", "finite and positive"});
  EXPECT_EQ(e.state_bytes(), e_before);
  // Saving such a state with its FP8 part is refused before anything is written.
  expect_error(
      [&] {
        mt::io::save_checkpoint((tmp.path / "refused").string(), *d.model, *d.opt, *d.scaler, 2,
                                nlohmann::json::object(), {nullptr, nullptr, d.fp8.get()});
      },
      {"save_checkpoint", "refusing", "2.fp8_scale"});
  EXPECT_FALSE(fs::exists(tmp.path / "refused"));
}
