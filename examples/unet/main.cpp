// Trains a UNet to segment Fashion-MNIST images per pixel (background or the item's class), under
// AMP by default, with mixtrain's public API.
//   unet                        Fashion-MNIST (Debian package dataset-fashion-mnist)
//   unet --synthetic            generated images and labels, no files
// Options: --precision fp32|fp16|bf16 (fp16) --device cpu|cuda (cuda when present) --steps N
//          --batch-size N --lr X --seed N --image-size S --width W --channels-last --log-every K --data-dir DIR
#include <iostream>

#include "common/flags.h"
#include "unet/unet_trainer.h"

namespace ex = mixtrain::examples;

namespace {

const char* kUsage =
    "usage: unet [--synthetic] [--data-dir DIR] [--precision fp32|fp16|bf16] [--device cpu|cuda]\n"
    "            [--steps N] [--batch-size N] [--lr X] [--seed N] [--image-size S] [--width W] [--channels-last] [--log-every K]\n"
    "            [--checkpoint-activations]\n";

ex::UnetConfig parse_args(int argc, char** argv) {
  ex::UnetConfig c;
  c.log = &std::cout;
  ex::FlagReader flags("unet", kUsage, argc, argv);
  std::string f;
  while (flags.next(f)) {
    if (ex::read_run_flag(flags, f, c)) continue;
    if (f == "--synthetic") {
      c.synthetic = true;
    } else if (f == "--data-dir") {
      c.data_dir = flags.value();
    } else if (f == "--image-size") {
      c.image_size = flags.number<int64_t>(1);
    } else if (f == "--width") {
      c.width = flags.number<int64_t>(1);
    } else if (f == "--checkpoint-activations") {
      c.checkpoint_activations = true;
    } else if (f == "--channels-last") {
      c.channels_last = true;
    } else {
      flags.unknown();
    }
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  return ex::run_program([&] { ex::run_unet(parse_args(argc, argv)); });
}
