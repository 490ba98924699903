#include "unet/unet_model.h"

namespace mixtrain::examples {

namespace {

// Conv 3x3 -> ReLU -> BatchNorm2d, twice (the Spell UNet's order: normalisation after the ReLU).
// The ReLUs run in place: a convolution's backward reads its input and weight, not its output.
nn::Sequential double_conv(int64_t in, int64_t out) {
  const auto relu = [] { return nn::ReLU(nn::ReLUOptions().inplace(true)); };
  return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, out, 3).padding(1)), relu(), nn::BatchNorm2d(out),
                        nn::Conv2d(nn::Conv2dOptions(out, out, 3).padding(1)), relu(), nn::BatchNorm2d(out));
}

// fn(inputs...) directly, or through nn::checkpoint.
template <class F, class... Ts>
Tensor stage(bool checkpointed, F fn, const Ts&... inputs) {
  return checkpointed ? nn::checkpoint(std::move(fn), inputs...) : fn(inputs...);
}

}  // namespace

UNetImpl::UNetImpl(const UNetOptions& o) : Module("UNet"), options_(o) {
  MT_CHECK(o.in_channels > 0 && o.classes > 1 && o.width > 0 && o.levels >= 1, "UNet: bad options: in_channels ",
           o.in_channels, ", classes ", o.classes, ", width ", o.width, ", levels ", o.levels);
  encoders_ = register_module("encoders", nn::ModuleList());
  upsamplers_ = register_module("upsamplers", nn::ModuleList());
  decoders_ = register_module("decoders", nn::ModuleList());
  for (int64_t i = 0; i < o.levels; ++i)
    encoders_->push_back(double_conv(i == 0 ? o.in_channels : o.width << (i - 1), o.width << i));
  for (int64_t i = o.levels - 2; i >= 0; --i) {
    upsamplers_->push_back(nn::ConvTranspose2d(nn::ConvTranspose2dOptions(o.width << (i + 1), o.width << i, 2).stride(2)));
    decoders_->push_back(double_conv(o.width << (i + 1), o.width << i));
  }
  pool_ = register_module("pool", nn::MaxPool2d(2));
  head_ = register_module("head", nn::Conv2d(o.width, o.classes, 1));
}

Tensor UNetImpl::forward(const Tensor& input) {
  const int64_t multiple = int64_t{1} << (options_.levels - 1);
  MT_CHECK(input.dim() == 4 && input.size(1) == options_.in_channels && input.size(2) % multiple == 0 &&
               input.size(3) % multiple == 0,
           "UNet: expected input [N, ", options_.in_channels, ", H, W] with H and W multiples of ", multiple, ", got ",
           input.summary());
  // Each stage's inputs are tensors kept anyway (the skips), so a checkpointed stage keeps
  // nothing of its own. The lambdas hold shared module handles: backward calls them again.
  const bool ckpt = options_.checkpoint_activations;
  std::vector<Tensor> skips;
  const auto first = encoders_->ptr(0);
  Tensor x = stage(ckpt, [first](const Tensor& in) { return first->forward(in); }, input);
  for (size_t i = 1; i < encoders_->size(); ++i) {
    skips.push_back(x);
    const auto enc = encoders_->ptr(i);
    const nn::MaxPool2d pool = pool_;
    x = stage(ckpt, [enc, pool](const Tensor& in) { return enc->forward(pool(in)); }, x);
  }
  for (size_t j = 0; j < upsamplers_->size(); ++j) {
    const auto up = upsamplers_->ptr(j), dec = decoders_->ptr(j);
    x = stage(ckpt, [up, dec](const Tensor& skip, const Tensor& in) { return dec->forward(cat({skip, up->forward(in)}, 1)); },
              skips[skips.size() - 1 - j], x);
  }
  return head_(x);
}

}  // namespace mixtrain::examples
