#pragma once
// The UNet example: per-pixel segmentation of Fashion-MNIST images (each pixel is background, 0,
// or its item's class + 1: 11 classes), images upsampled to --image-size; or, with --synthetic,
// random images whose pixels are labelled by a fixed random linear map of their channels,
// generated on the training device. A library so the `mixtrain` tool and the tests reuse it.
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include <mixtrain/mixtrain.h>
#include "common/run_task.h"

namespace mixtrain::examples {

struct UnetConfig {
  bool synthetic = false;
  std::string data_dir = data::kFashionMnistDir;
  int64_t image_size = 32;     // a multiple of 8; Fashion-MNIST's 28x28 images are resized to it
  int64_t width = 64;          // channels of the first level (64: the benchmark's ~7.7M parameters)
  int64_t in_channels = 3;     // synthetic only (Fashion-MNIST is greyscale: 1)
  int64_t classes = 9;         // synthetic only (Fashion-MNIST: 11)
  int64_t synthetic_batches = 4;  // distinct pre-generated batches, reused in turn
  double threshold = 0.1;      // a pixel (0..1) above this belongs to the item
  bool channels_last = false;  // weights and images (so every activation) in NHWC, for tensor-core convolutions
  bool checkpoint_activations = false;  // recompute each UNet stage in backward (UNetOptions)
  int64_t steps = 200;
  int64_t batch_size = 8;
  double lr = 1e-3;
  uint64_t seed = 0;
  train::Precision precision = train::Precision::Fp16;
  Device device = train::default_device();
  int64_t log_every = 20;
  bool memory_plan = false;     // steps served from static memory plans (TrainOptions::memory_plan)
  std::ostream* log = nullptr;
};

struct UnetResult : RunSummary {
  double pixel_accuracy = 0;  // on held-out images
};

// Throws mixtrain::Error for bad configuration or missing data (naming the Debian package).
std::unique_ptr<train::TrainTask> make_unet_task(const UnetConfig& config);
UnetResult run_unet(const UnetConfig& config);

}  // namespace mixtrain::examples
