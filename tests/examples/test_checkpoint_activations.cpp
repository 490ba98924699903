// --checkpoint-activations in the transformer and UNet trainers: a few training steps give the
// same losses, bit for bit, with and without recomputing each block / stage in backward (the
// transformer with dropout on, so the recomputed masks must match), in fp32 and under AMP.
#include "support/testing.h"
#include "transformer/transformer_trainer.h"
#include "unet/unet_trainer.h"

namespace mt = mixtrain;
namespace ex = mixtrain::examples;
namespace tr = mixtrain::train;

TEST(CheckpointActivations, TransformerLossesAreIdentical) {
  for (tr::Precision p : {tr::Precision::Fp32, tr::Precision::Bf16, tr::Precision::Fp16}) {
    auto run = [p](bool checkpointed) {
      ex::TransformerConfig c;
      c.synthetic = true;
      c.model = ex::gpt_preset("tiny");
      c.model.dropout = 0.1;
      c.model.checkpoint_activations = checkpointed;
      c.batch_size = 4;
      c.steps = 4;
      c.precision = p;
      c.seed = 3;
      c.device = mt::Device::cpu();
      const ex::TransformerResult r = ex::run_transformer(c);
      std::vector<double> out = r.losses;
      out.push_back(r.held_out_loss);
      return out;
    };
    const std::vector<double> plain = run(false);
    ASSERT_EQ(plain.size(), 5u);
    EXPECT_EQ(plain, run(true)) << tr::precision_name(p);
  }
}

TEST(CheckpointActivations, UnetLossesAreIdentical) {
  for (tr::Precision p : {tr::Precision::Fp32, tr::Precision::Bf16}) {
    auto run = [p](bool checkpointed) {
      ex::UnetConfig c;
      c.synthetic = true;
      c.width = 4;
      c.image_size = 16;
      c.batch_size = 2;
      c.steps = 3;
      c.seed = 4;
      c.precision = p;
      c.checkpoint_activations = checkpointed;
      c.device = mt::Device::cpu();
      const ex::UnetResult r = ex::run_unet(c);
      std::vector<double> out = r.losses;
      out.push_back(r.pixel_accuracy);
      return out;
    };
    const std::vector<double> plain = run(false);
    ASSERT_EQ(plain.size(), 4u);
    EXPECT_EQ(plain, run(true)) << tr::precision_name(p);
  }
}
