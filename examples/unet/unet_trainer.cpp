#include "unet/unet_trainer.h"

#include <cmath>
#include <iomanip>
#include <optional>
#include <ostream>
#include <sstream>

#include "unet/unet_model.h"

namespace mixtrain::examples {

namespace {

namespace F = nn::functional;

// Fashion-MNIST's pixel mean and deviation (on the 0..1 scale), to standardise the input.
constexpr double kPixelMean = 0.2860, kPixelStd = 0.3530;

struct SegBatch {
  Tensor image;   // [N, C, S, S] float32
  Tensor labels;  // [N, S, S] int64
};

class UnetTrainTask : public train::TrainTask {
 public:
  explicit UnetTrainTask(const UnetConfig& c) : config_(c) {
    MT_CHECK(c.image_size >= 8 && c.image_size % 8 == 0, "unet: --image-size must be a positive multiple of 8, got ",
             c.image_size);
    MT_CHECK(c.width > 0, "unet: --width must be positive, got ", c.width);
    MT_CHECK(c.batch_size > 0, "unet: --batch-size must be positive, got ", c.batch_size);
    UNetOptions o;
    o.width = c.width;
    o.checkpoint_activations = c.checkpoint_activations;
    if (c.synthetic) {
      MT_CHECK(c.in_channels > 0 && c.classes > 1 && c.synthetic_batches > 0, "unet: bad synthetic options");
      o.in_channels = c.in_channels;
      o.classes = c.classes;
    } else {
      train_ = data::load_fashion_mnist(c.data_dir, true);
      test_ = data::load_fashion_mnist(c.data_dir, false);
      o.in_channels = 1;
      o.classes = 11;
    }
    manual_seed(c.seed);
    model_ = UNet(o);
    model_.to(c.device);
    // Weights as well as images NHWC, as PyTorch's channels-last recipe does: the convolutions
    // then take their weights as they are, and the optimizer's state follows.
    if (c.channels_last) model_.to(MemoryFormat::ChannelsLast);
    std::ostringstream os;
    os << "unet width " << c.width << " on " << (c.synthetic ? "synthetic " : "fashion-mnist ") << o.in_channels << "x"
       << c.image_size << "x" << c.image_size << ", " << o.classes << " classes: " << train::parameter_count(*model_)
       << " parameters";
    description_ = os.str();
    if (c.synthetic) {
      make_synthetic(o);
    } else {
      loader_ = std::make_unique<data::DataLoader>(
          train_, training_loader_options(c.batch_size, c.device).shuffle(true).seed(c.seed));
      start_ = loader_->state_dict();
    }
  }

  nn::Module& model() override { return *model_; }
  data::DataLoader* loader() override { return loader_.get(); }
  int64_t batch_size() const override { return config_.batch_size; }
  std::string describe() const override { return description_; }

  std::vector<int64_t> prepare_batch() override {
    pending_ = draw();
    return shapes_key({pending_->image, pending_->labels});
  }

  Tensor next_loss() override {
    const SegBatch b = pending_ ? std::move(*pending_) : draw();
    pending_.reset();
    // Data parallel: this rank's images. Batch norm normalises over the rank's images only (no
    // synchronised batch norm), so the curve differs slightly from one process's.
    Tensor image = b.image, labels = b.labels;
    take_shard(image, labels);
    return F::cross_entropy(model_(image), labels);
  }

  void skip_batches(int64_t n) override {
    if (loader_)
      loader_->skip(n);
    else
      next_ += static_cast<size_t>(n);
  }

  void seek_batches(int64_t n) override {
    pending_.reset();
    seek_stream(n, loader_.get(), start_, next_);
  }

  // Pixel accuracy on held-out images (up to 512 test images, or the held-out synthetic batch).
  std::string evaluate() override {
    model_.eval();
    NoGradGuard no_grad;
    int64_t correct = 0, total = 0;
    auto account = [&](const SegBatch& b) {
      const Tensor hit = eq(model_(b.image).argmax(1), b.labels).to(kFloat32);
      correct += static_cast<int64_t>(std::llround(hit.sum().item<double>()));
      total += hit.numel();
    };
    if (loader_) {
      data::DataLoader test_loader(test_, data::DataLoaderOptions().batch_size(64).device(config_.device));
      data::Batch b;
      for (int i = 0; i < 8 && test_loader.next(b); ++i) account(segment(b));
    } else {
      account(held_out_);
    }
    model_.train();
    pixel_accuracy = static_cast<double>(correct) / static_cast<double>(total);
    std::ostringstream os;
    os << std::fixed << std::setprecision(4) << "pixel accuracy " << pixel_accuracy << " on " << total / 1000
       << "k held-out pixels";
    return os.str();
  }

  double pixel_accuracy = 0;

 private:
  SegBatch draw() { return loader_ ? segment(loader_->next_batch()) : batches_[next_++ % batches_.size()]; }

  // Fashion-MNIST rows [N, 784] in 0..1 and class labels [N] to an upsampled, standardised image
  // and per-pixel labels, computed on the training device.
  SegBatch segment(const data::Batch& b) const {
    NoGradGuard no_grad;
    const Device dev = config_.device;
    const int64_t n = b.data.size(0), s = config_.image_size;
    Tensor img = b.data.to(dev).reshape({n, 1, 28, 28});
    if (s != 28)
      img = F::interpolate(img, F::InterpolateOptions().size(s).mode(F::InterpolateMode::Bilinear).align_corners(false));
    const Tensor item = gt(img, scalar_tensor(config_.threshold, TensorOptions(dev)));
    const Tensor cls = (b.target.to(dev).to(kFloat32) + 1.0).reshape({n, 1, 1, 1});
    SegBatch out;
    out.labels = where(item, cls, scalar_tensor(0.0, TensorOptions(dev))).reshape({n, s, s}).to(kInt64);
    out.image = in_layout((img - kPixelMean) / kPixelStd);
    return out;
  }

  // The network keeps its input's layout, so the images decide the activations' layout.
  Tensor in_layout(const Tensor& image) const {
    return config_.channels_last ? image.contiguous(MemoryFormat::ChannelsLast) : image;
  }

  // Images x ~ N(0, 1); each pixel's label is the argmax of a fixed random linear map of its
  // channels: learnable by the network, generated on the device with no files.
  void make_synthetic(const UNetOptions& o) {
    NoGradGuard no_grad;
    Generator gen(config_.seed ^ 0x00e7u);
    const TensorOptions on(config_.device);
    const Tensor map = randn({o.in_channels, o.classes}, gen, on);
    auto make = [&]() {
      SegBatch b;
      const int64_t s = config_.image_size;
      b.image = randn({config_.batch_size, o.in_channels, s, s}, gen, on);
      b.labels = matmul(b.image.permute({0, 2, 3, 1}), map).argmax(-1);
      b.image = in_layout(b.image);
      return b;
    };
    for (int64_t i = 0; i < config_.synthetic_batches; ++i) batches_.push_back(make());
    held_out_ = make();
  }

  UnetConfig config_;
  data::TensorDataset train_, test_;
  std::unique_ptr<data::DataLoader> loader_;  // declared after train_, so destroyed before it
  std::vector<SegBatch> batches_;
  SegBatch held_out_;
  size_t next_ = 0;
  nlohmann::json start_;  // the training loader's state before its first batch (seek_batches)
  std::optional<SegBatch> pending_;  // drawn by prepare_batch for the next next_loss
  UNet model_{nullptr};
  std::string description_;
};

}  // namespace

std::unique_ptr<train::TrainTask> make_unet_task(const UnetConfig& config) { return std::make_unique<UnetTrainTask>(config); }

UnetResult run_unet(const UnetConfig& config) {
  MT_CHECK(config.steps > 0, "unet: --steps must be positive, got ", config.steps);
  UnetTrainTask task(config);
  UnetResult r;
  run_into(task, config, r);
  r.pixel_accuracy = task.pixel_accuracy;
  return r;
}

}  // namespace mixtrain::examples
