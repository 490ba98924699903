#pragma once
// A UNet for per-pixel classification: the encoder-decoder of the Spell AMP benchmark (3x3
// convolutions each followed by ReLU then BatchNorm2d, widths w, 2w, 4w, 8w with MaxPool2d(2)
// between levels, ConvTranspose2d(k=2, s=2) up, skip connections concatenated, a final 1x1
// convolution to the classes). The convolutions are padded, so the output has the input's size
// and no cropping is needed; padding changes no parameter count, so at width 64, 3 input channels
// and 9 classes this has the benchmark's 7,703,497 parameters.
#include <cstdint>

#include <mixtrain/mixtrain.h>

namespace mixtrain::examples {

struct UNetOptions {
  int64_t in_channels = 1;
  int64_t classes = 11;
  int64_t width = 64;   // channels of the first level; level i has width * 2^i
  int64_t levels = 4;   // encoder levels; the input size must be divisible by 2^(levels - 1)
  // Recompute each stage (an encoder level with its pooling, a decoder level with its upsampling
  // and concatenation) in backward instead of keeping its activations (nn::checkpoint).
  bool checkpoint_activations = false;
};

class UNetImpl : public nn::Module {
 public:
  explicit UNetImpl(const UNetOptions& options);
  // [N, in_channels, H, W] -> logits [N, classes, H, W]
  Tensor forward(const Tensor& input) override;
  const UNetOptions& options() const { return options_; }

 private:
  UNetOptions options_;
  nn::ModuleList encoders_{nullptr};   // "encoders.i": two conv-ReLU-BN at width * 2^i
  nn::MaxPool2d pool_{nullptr};
  nn::ModuleList upsamplers_{nullptr};  // "upsamplers.j": ConvTranspose2d halving the channels
  nn::ModuleList decoders_{nullptr};    // "decoders.j": two conv-ReLU-BN over [skip, upsampled]
  nn::Conv2d head_{nullptr};
};
MT_MODULE(UNet);

}  // namespace mixtrain::examples
