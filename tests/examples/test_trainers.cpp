// The UNet and transformer examples and AMP convergence parity for all three models: with the
// same seed and data, fp16 (with loss scaling) and bf16 autocast reach the fp32 loss within a few
// percent, and every model's loss falls well below its start. Also the models' documented sizes.
#include <cmath>
#include <numeric>
#include <fstream>
#include <sys/stat.h>

#include "mlp/mlp_trainer.h"
#include "support/testing.h"
#include "transformer/transformer_trainer.h"
#include "unet/unet_model.h"
#include "unet/unet_trainer.h"

namespace mt = mixtrain;
namespace ex = mixtrain::examples;
namespace tr = mixtrain::train;

namespace {

double mean_of(const std::vector<double>& v, size_t begin, size_t end) {
  return std::accumulate(v.begin() + static_cast<std::ptrdiff_t>(begin), v.begin() + static_cast<std::ptrdiff_t>(end),
                         0.0) /
         static_cast<double>(end - begin);
}

// The small synthetic UNet run the UNet tests share, on the CPU.
ex::UnetConfig small_synthetic_unet(tr::Precision p, int64_t steps, uint64_t seed) {
  ex::UnetConfig c;
  c.synthetic = true;
  c.width = 8;
  c.image_size = 16;
  c.batch_size = 4;
  c.steps = steps;
  c.seed = seed;
  c.precision = p;
  c.device = mt::Device::cpu();
  return c;
}

// Runs `run(precision)` (the per-step losses) for fp32, fp16 and bf16 and checks that the loss
// falls below `fall` times its start and that the AMP runs end within `rel` of fp32 (mean of the
// last 5 steps, to average out single-batch noise).
template <class Run>
void expect_parity(Run run, double fall, double rel) {
  const std::vector<double> fp32 = run(tr::Precision::Fp32);
  const size_t n = fp32.size();
  const double start = mean_of(fp32, 0, 3), end32 = mean_of(fp32, n - 5, n);
  EXPECT_LT(end32, fall * start) << "fp32 loss " << start << " -> " << end32;
  for (tr::Precision p : {tr::Precision::Fp16, tr::Precision::Bf16}) {
    const std::vector<double> amp = run(p);
    ASSERT_EQ(amp.size(), n);
    const double end = mean_of(amp, n - 5, n);
    EXPECT_NEAR(end, end32, rel * end32) << tr::precision_name(p) << " ends at " << end << ", fp32 at " << end32;
    EXPECT_LT(end, fall * mean_of(amp, 0, 3)) << tr::precision_name(p);
  }
}

}  // namespace

TEST(AmpParity, Mlp) {
  expect_parity(
      [](tr::Precision p) {
        ex::MlpConfig c;
        c.task = ex::MlpTask::Synthetic;
        c.synthetic_samples = 1024;
        c.hidden = {64, 32};
        c.steps = 150;
        c.batch_size = 64;
        c.seed = 1;
        c.precision = p;
        c.device = mt::Device::cpu();
        return ex::run_mlp(c).losses;
      },
      0.3, 0.05);
}

TEST(AmpParity, Unet) {
  expect_parity(
      [](tr::Precision p) {
        ex::UnetConfig c = small_synthetic_unet(p, 60, 2);
        c.lr = 3e-3;
        return ex::run_unet(c).losses;
      },
      0.5, 0.05);
}

TEST(UnetExample, ChannelsLastTrainsLikeNchw) {
  // The same run with NHWC images: every op keeps the layout, and the losses agree step by step
  // (fp16: batch norm sums its pixels in another order, so to rounding, not bit for bit).
  for (tr::Precision p : {tr::Precision::Fp32, tr::Precision::Fp16}) {
    std::vector<double> losses[2];
    for (bool channels_last : {false, true}) {
      ex::UnetConfig c = small_synthetic_unet(p, 8, 3);
      c.channels_last = channels_last;
      losses[channels_last] = ex::run_unet(c).losses;
    }
    ASSERT_EQ(losses[0].size(), losses[1].size());
    for (size_t i = 0; i < losses[0].size(); ++i)
      EXPECT_NEAR(losses[1][i], losses[0][i], (p == tr::Precision::Fp32 ? 1e-5 : 2e-3) * losses[0][i])
          << tr::precision_name(p) << " step " << i;
  }
}

TEST(AmpParity, Transformer) {
  expect_parity(
      [](tr::Precision p) {
        ex::TransformerConfig c;
        c.synthetic = true;
        c.model = ex::gpt_preset("tiny");
        c.batch_size = 8;
        c.steps = 120;
        c.lr = 3e-3;
        c.seed = 3;
        c.precision = p;
        c.device = mt::Device::cpu();
        return ex::run_transformer(c).losses;
      },
      0.5, 0.05);
}

TEST(UnetExample, SpellBenchmarkParameterCount) {
  // The Spell benchmark's UNet (3 input channels, 9 classes) has 7,703,497 parameters
  // (docs/TRAINERS.md; counted from its code).
  ex::UNetOptions spell;
  spell.in_channels = 3;
  spell.classes = 9;
  EXPECT_EQ(tr::parameter_count(*ex::UNet(spell)), 7703497);
  // The Fashion-MNIST default: 1 input channel, 11 classes: within 1% of 7.7M.
  const int64_t fmnist = tr::parameter_count(*ex::UNet(ex::UNetOptions{}));
  EXPECT_NEAR(static_cast<double>(fmnist), 7.7e6, 0.01 * 7.7e6);
  // First conv 1 -> 64 instead of 3 -> 64 (-2 * 64 * 9) and head 64 -> 11 instead of 9 (+2 * 65).
  EXPECT_EQ(fmnist, 7703497 - 2 * 64 * 9 + 2 * 65);
}

TEST(UnetExample, OutputMatchesInputSizeAndNamesBuffers) {
  ex::UNetOptions o;
  o.width = 4;
  ex::UNet net(o);
  const mt::Tensor y = net(mt::randn({2, 1, 24, 16}));
  EXPECT_EQ(y.shape(), (mt::Shape{2, 11, 24, 16}));
  const auto sd = net.state_dict();
  EXPECT_TRUE(sd.count("encoders.0.2.running_mean"));  // conv, ReLU, BatchNorm2d
  EXPECT_TRUE(sd.count("upsamplers.0.weight"));
  EXPECT_TRUE(sd.count("head.bias"));
  EXPECT_THROW(net(mt::randn({1, 1, 20, 20})), mt::Error);  // not a multiple of 8
  // A one-channel image made channels-last carries the layout through every level to the output.
  net->eval();
  const mt::Tensor x = mt::randn({2, 1, 24, 16});
  const mt::Tensor y_cl = net(x.contiguous(mt::MemoryFormat::ChannelsLast));
  EXPECT_EQ(y_cl.suggest_memory_format(), mt::MemoryFormat::ChannelsLast);
  EXPECT_TRUE(mt::testing::all_close(y_cl, mt::testing::to_doubles(net(x)), mt::testing::tolerance_for(mt::kFloat32)));
}

TEST(TransformerExample, BertBaseSizes) {
  // Per block: attention 4 E^2 + 4 E, MLP 8 E^2 + 5 E, two LayerNorms 4 E: 12 E^2 + 13 E.
  const int64_t e = 768, v = 256;
  const int64_t blocks = 12 * (12 * e * e + 13 * e);
  EXPECT_EQ(blocks, 85054464);
  ex::Gpt gpt(ex::GptOptions::bert_base());
  // Outside the embeddings: the blocks, the final LayerNorm and the (untied) head.
  EXPECT_EQ(gpt->non_embedding_parameters(), blocks + 2 * e + e * v + v);
  EXPECT_EQ(tr::parameter_count(*gpt), gpt->non_embedding_parameters() + v * e + 128 * e);
}

TEST(TransformerExample, LearnsTextAndExplainsMissingCorpus) {
  const std::string path = ::testing::TempDir() + "mixtrain_text_" + std::to_string(::getpid()) + ".txt";
  {
    std::ofstream out(path);
    for (int i = 0; i < 200; ++i) out << "the quick brown fox jumps over the lazy dog. ";
  }
  ex::TransformerConfig c;
  c.text_path = path;
  c.model = ex::gpt_preset("tiny");
  c.steps = 60;
  c.lr = 3e-3;
  c.device = mt::Device::cpu();
  const ex::TransformerResult r = ex::run_transformer(c);
  EXPECT_GT(mean_of(r.losses, 0, 3), 4.0);  // ln 256 = 5.5 at the start
  EXPECT_LT(mean_of(r.losses, 55, 60), 2.0);
  EXPECT_LT(r.held_out_loss, 2.5);

  mt::testing::expect_error([] { ex::load_text_corpus(ex::kFortunesDir + std::string("-missing")); }, "-missing");
  // The default corpus names its package when absent (checked by message, present or not).
  const std::string hint = "install the Debian package fortunes";
  try {
    ex::load_text_corpus(ex::kFortunesDir);
  } catch (const mt::Error& e) {
    EXPECT_NE(std::string(e.what()).find(hint), std::string::npos) << e.what();
  }
}

TEST(UnetExample, SegmentsFashionMnistIfInstalled) {
  struct stat st {};
  if (::stat(mt::data::kFashionMnistDir, &st) != 0) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  ex::UnetConfig c;
  c.width = 8;
  c.image_size = 16;
  c.steps = 40;
  c.lr = 3e-3;
  c.device = mt::Device::cpu();
  const ex::UnetResult r = ex::run_unet(c);
  EXPECT_GT(mean_of(r.losses, 0, 3), 1.8);  // ln 11 = 2.4 at chance
  EXPECT_LT(mean_of(r.losses, 35, 40), 0.75 * mean_of(r.losses, 0, 3));
  EXPECT_GT(r.pixel_accuracy, 0.5);  // background alone is about half the pixels
}
