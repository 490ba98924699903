// The trainers at --precision fp8 on the CPU: the tiny transformer's Linear layers in FP8
// (delayed scaling, HYBRID) learn as bf16 does, and a run resumed from a checkpoint repeats the
// uninterrupted one's losses and weights bit for bit (N + N steps against 2N; the report's
// 100 + 100 against 200 is the same check with `mixtrain train`, run once by hand).
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <numeric>

#include "support/testing.h"
#include "transformer/transformer_trainer.h"

namespace mt = mixtrain;
namespace ex = mixtrain::examples;
namespace tr = mixtrain::train;
namespace fs = std::filesystem;

namespace {

ex::TransformerConfig tiny_transformer(tr::Precision p, int64_t steps) {
  ex::TransformerConfig c;
  c.synthetic = true;
  c.model = ex::gpt_preset("tiny");
  c.batch_size = 8;
  c.steps = steps;
  c.lr = 3e-3;
  c.seed = 3;
  c.precision = p;
  c.device = mt::Device::cpu();
  return c;
}

double mean_of(const std::vector<double>& v, size_t begin, size_t end) {
  return std::accumulate(v.begin() + static_cast<std::ptrdiff_t>(begin), v.begin() + static_cast<std::ptrdiff_t>(end),
                         0.0) /
         static_cast<double>(end - begin);
}

std::vector<std::vector<uint8_t>> weights_of(tr::TrainTask& task) {
  std::vector<std::vector<uint8_t>> out;
  for (const auto& [name, t] : task.model().state_dict()) out.push_back(mt::testing::bytes_of(t));
  return out;
}

}  // namespace

TEST(Fp8Parity, TinyTransformerLearnsAsBf16Does) {
  const std::vector<double> bf16 = ex::run_transformer(tiny_transformer(tr::Precision::Bf16, 120)).losses;
  const std::vector<double> fp8 = ex::run_transformer(tiny_transformer(tr::Precision::Fp8, 120)).losses;
  ASSERT_EQ(fp8.size(), bf16.size());
  const size_t n = fp8.size();
  const double end16 = mean_of(bf16, n - 5, n), end8 = mean_of(fp8, n - 5, n);
  std::printf("tiny transformer, 120 steps: bf16 %.4f, fp8 %.4f (%+.2f%%)\n", end16, end8, 100 * (end8 / end16 - 1));
  EXPECT_LT(end8, 0.5 * mean_of(fp8, 0, 3));
  EXPECT_NEAR(end8, end16, 0.05 * end16);
}

TEST(Fp8Resume, TrainResumedFromACheckpointRepeatsTheStraightRunBitForBit) {
  constexpr int64_t kN = 6;
  const fs::path dir = fs::temp_directory_path() / ("mt_fp8_resume_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  tr::TrainOptions o;
  o.precision = tr::Precision::Fp8;
  o.device = mt::Device::cpu();
  o.lr = 3e-3;
  o.constant_lr = true;  // a schedule over the run's steps would differ between N and 2N
  o.fp8_recipe = mt::amp::Fp8Recipe().history_len(4);  // shorter than the run: the histories wrap

  auto straight_task = ex::make_transformer_task(tiny_transformer(tr::Precision::Fp8, 2 * kN));
  o.steps = 2 * kN;
  const tr::TrainResult straight = tr::train(*straight_task, o);

  auto first_task = ex::make_transformer_task(tiny_transformer(tr::Precision::Fp8, 2 * kN));
  o.steps = kN;
  o.save_dir = (dir / "ckpt").string();
  const tr::TrainResult first = tr::train(*first_task, o);
  EXPECT_EQ(first.fp8_layers.size(), 7u);  // two blocks: fc1, fc2, attention out_proj; the head
  EXPECT_EQ(first.linear_layers, 7);

  auto resumed_task = ex::make_transformer_task(tiny_transformer(tr::Precision::Fp8, 2 * kN));
  o.steps = 2 * kN;
  o.save_dir.clear();
  o.resume_dir = (dir / "ckpt").string();
  const tr::TrainResult resumed = tr::train(*resumed_task, o);
  ASSERT_EQ(resumed.first_step, kN + 1);
  ASSERT_EQ(first.records.size() + resumed.records.size(), straight.records.size());
  for (size_t i = 0; i < straight.records.size(); ++i) {
    const double l = i < first.records.size() ? first.records[i].loss : resumed.records[i - first.records.size()].loss;
    EXPECT_EQ(std::memcmp(&l, &straight.records[i].loss, sizeof l), 0) << "step " << i + 1;
  }
  EXPECT_EQ(weights_of(*resumed_task), weights_of(*straight_task));  // FP8 scales and histories included
  fs::remove_all(dir);
}
