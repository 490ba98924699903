#include "transformer/transformer_trainer.h"

#include <cmath>
#include <iomanip>
#include <optional>
#include <ostream>
#include <sstream>

namespace mixtrain::examples {

namespace {

namespace F = nn::functional;

struct TokenBatch {
  Tensor x, y;  // int64 [N, T] on the device
};

class TransformerTrainTask : public train::TrainTask {
 public:
  explicit TransformerTrainTask(const TransformerConfig& c) : config_(c) {
    MT_CHECK(c.batch_size > 0, "transformer: --batch-size must be positive, got ", c.batch_size);
    MT_CHECK(c.model.vocab == 256, "transformer: the byte-level model needs vocab 256, got ", c.model.vocab);
    if (c.synthetic) {
      MT_CHECK(c.synthetic_batches > 0, "transformer: synthetic_batches must be positive");
    } else {
      text_ = load_text_corpus(c.text_path);
      // The last 5% is held out for evaluation.
      const size_t split = text_.size() - text_.size() / 20;
      train_windows_ = std::make_unique<TextWindows>(text_, 0, split, c.model.context);
      test_windows_ = std::make_unique<TextWindows>(text_, split, text_.size(), c.model.context);
      train_loader_ = window_loader(*train_windows_, c.seed);
      test_loader_ = window_loader(*test_windows_, c.seed + 1);
      start_ = train_loader_->state_dict();
    }
    manual_seed(c.seed);
    model_ = Gpt(c.model);
    model_.to(c.device);
    std::ostringstream os;
    os << "gpt " << c.model.layers << " layers, width " << c.model.width << ", " << c.model.heads << " heads, context "
       << c.model.context << " on " << (c.synthetic ? std::string("synthetic sequences") : c.text_path + " (" +
                                                           std::to_string(text_.size() / 1024) + " KiB)")
       << ": " << train::parameter_count(*model_) << " parameters (" << model_->non_embedding_parameters()
       << " outside the embeddings)";
    description_ = os.str();
    if (c.synthetic) make_synthetic();
  }

  nn::Module& model() override { return *model_; }
  data::DataLoader* loader() override { return train_loader_.get(); }
  train::LrSchedule schedule() const override {
    return {config_.warmup_steps, /*cosine=*/true};  // -1: a tenth of the run's steps
  }
  int64_t batch_size() const override { return config_.batch_size; }
  std::string describe() const override { return description_; }

  std::vector<int64_t> prepare_batch() override {
    pending_ = next_batch();
    return shapes_key({pending_->x, pending_->y});
  }

  Tensor next_loss() override {
    TokenBatch b = pending_ ? std::move(*pending_) : next_batch();
    pending_.reset();
    // Data parallel: this rank's sequences of the batch every rank drew (all of one length, so
    // the per-token mean weighted by sequences is the global batch's mean).
    take_shard(b.x, b.y);
    return loss_of(b);
  }

  void skip_batches(int64_t n) override {
    if (train_loader_)
      train_loader_->skip(n);
    else
      next_ += static_cast<size_t>(n);
  }

  void seek_batches(int64_t n) override {
    pending_.reset();
    seek_stream(n, train_loader_.get(), start_, next_);
  }

  // Mean loss over 8 held-out batches (the corpus' last 5%, or one fresh synthetic batch).
  std::string evaluate() override {
    model_.eval();
    NoGradGuard no_grad;
    double sum = 0;
    int count = 0;
    if (test_loader_) {
      for (; count < 8; ++count) {
        const data::Batch b = test_loader_->next_batch();
        sum += loss_of({b.data, b.target}).item<double>();
      }
    } else {
      sum = loss_of(held_out_).item<double>();
      count = 1;
    }
    model_.train();
    held_out_loss = sum / count;
    std::ostringstream os;
    os << std::fixed << std::setprecision(4) << "held-out loss " << held_out_loss << " (" << held_out_loss / std::log(2.0)
       << " bits per byte)";
    return os.str();
  }

  double held_out_loss = 0;
  int64_t non_embedding_parameters() const { return model_->non_embedding_parameters(); }

 private:
  Tensor loss_of(const TokenBatch& b) {
    const Tensor logits = model_(b.x);
    return F::cross_entropy(logits.reshape({-1, config_.model.vocab}), b.y.reshape({-1}));
  }

  TokenBatch next_batch() {
    if (!train_loader_) return batches_[next_++ % batches_.size()];
    const data::Batch b = train_loader_->next_batch();
    return {b.data, b.target};
  }

  // Windows at random offsets, drawn with replacement: an epoch is as many draws as there are
  // windows (the last, partial batch of an epoch is dropped to keep every batch full).
  std::unique_ptr<data::DataLoader> window_loader(const TextWindows& windows, uint64_t seed) const {
    auto sampler = std::make_shared<data::RandomSampler>(windows.size(), seed, /*replacement=*/true);
    return std::make_unique<data::DataLoader>(
        windows, sampler,
        training_loader_options(config_.batch_size, config_.device).drop_last(true));
  }

  // t_i = (s + k i) mod 256 with s in [0, 256) and k in [1, 4] per sequence: after two bytes the
  // rest is predictable, so the loss can fall far below ln 256. Built on the device from factory
  // outputs; the modulo is a lookup in a [1024, 1] table (n -> n mod 256) through embedding.
  void make_synthetic() {
    NoGradGuard no_grad;
    const TensorOptions on(config_.device);
    const int64_t n = config_.batch_size, t = config_.model.context;
    std::vector<float> mod(1024);
    for (size_t i = 0; i < mod.size(); ++i) mod[i] = static_cast<float>(i % 256);
    const Tensor table = from_vector(mod, {1024, 1}).to(config_.device);
    const Tensor steps = arange(static_cast<double>(t + 1), on).reshape({1, t + 1});
    MT_CHECK(255 + 4 * t < 1024, "transformer: synthetic sequences support a context up to 192, got ", t);
    Generator gen(config_.seed ^ 0x7e47u);
    auto make = [&]() {
      const Tensor start = (rand({n, 1}, gen, on) * 256.0).to(kInt64).to(kFloat32);
      const Tensor stride = (rand({n, 1}, gen, on) * 4.0).to(kInt64).to(kFloat32) + 1.0;
      const Tensor index = (start + stride * steps).to(kInt64);
      const Tensor seq = F::embedding(index, table).reshape({n, t + 1}).to(kInt64);
      return TokenBatch{seq.slice(1, 0, t).contiguous(), seq.slice(1, 1, t + 1).contiguous()};
    };
    for (int64_t i = 0; i < config_.synthetic_batches; ++i) batches_.push_back(make());
    held_out_ = make();
  }

  TransformerConfig config_;
  std::vector<uint8_t> text_;
  std::unique_ptr<TextWindows> train_windows_, test_windows_;
  std::unique_ptr<data::DataLoader> train_loader_, test_loader_;  // after the windows: destroyed first
  std::vector<TokenBatch> batches_;
  TokenBatch held_out_;
  size_t next_ = 0;
  nlohmann::json start_;  // the training loader's state before its first batch (seek_batches)
  std::optional<TokenBatch> pending_;  // drawn by prepare_batch for the next next_loss
  Gpt model_{nullptr};
  std::string description_;
};

}  // namespace

GptOptions gpt_preset(const std::string& name) {
  if (name == "tiny") return {256, 32, 64, 2, 4, 0.0};
  if (name == "small") return GptOptions();
  if (name == "bert-base") return GptOptions::bert_base();
  MT_ERROR("transformer: unknown preset '", name, "' (expected tiny, small or bert-base)");
}

std::unique_ptr<train::TrainTask> make_transformer_task(const TransformerConfig& config) {
  return std::make_unique<TransformerTrainTask>(config);
}

TransformerResult run_transformer(const TransformerConfig& config) {
  MT_CHECK(config.steps > 0, "transformer: --steps must be positive, got ", config.steps);
  TransformerTrainTask task(config);
  TransformerResult r;
  r.non_embedding_parameters = task.non_embedding_parameters();
  run_into(task, config, r);
  r.held_out_loss = task.held_out_loss;
  return r;
}

}  // namespace mixtrain::examples
