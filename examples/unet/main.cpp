// Trains a UNet to segment Fashion-MNIST images per pixel (background or the item's class), under
// AMP by default, with mixtrain's public API.
//   unet                        Fashion-MNIST (Debian package dataset-fashion-mnist)
//   unet --synthetic            generated images and labels, no files
// `unet --help` lists every flag with its default.
#include <iostream>

#include "common/cli.h"
#include "unet/unet_trainer.h"

namespace ex = mixtrain::examples;

int main(int argc, char** argv) {
  ex::UnetConfig c;
  c.log = &std::cout;
  auto flags = [&](CLI::App& app) {
    app.add_flag("--synthetic", c.synthetic, "generated images and labels (no files)");
    app.add_option("--data-dir", c.data_dir, "the Fashion-MNIST directory")->type_name("DIR");
    app.add_option("--image-size", c.image_size, "image side in pixels, a multiple of 8")
        ->check(ex::cli::integer_at_least(1))
        ->type_name("S");
    app.add_option("--width", c.width, "channels of the first level")->check(ex::cli::integer_at_least(1))->type_name("W");
    app.add_flag("--channels-last", c.channels_last, "NHWC weights and images");
    app.add_flag("--checkpoint-activations", c.checkpoint_activations,
                 "recompute each stage's activations in backward instead of keeping them");
    ex::cli::add_run_flags(app, c);
  };
  return ex::cli::run_program("unet", "Trains a UNet to segment images per pixel, under AMP.", argc, argv, flags,
                              [&] { ex::run_unet(c); });
}
