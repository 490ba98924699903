#include "mlp/mlp_trainer.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <optional>
#include <tuple>

#include "common/dataset.h"

namespace mixtrain::examples {

namespace {

constexpr int64_t kSyntheticInputs = 215, kTeacherHidden = 32;

// Standardises features and target with the training set's statistics, so one learning rate
// suits any CSV's units; targets become [rows, 1] to match the one-output model.
void standardise(data::TensorDataset& train, data::TensorDataset& test) {
  const Standardizer s = Standardizer::fit(train.data()), t = Standardizer::fit(train.target());
  train = data::TensorDataset(s.apply(train.data()), t.apply(train.target()).reshape({-1, 1}));
  test = data::TensorDataset(s.apply(test.data()), t.apply(test.target()).reshape({-1, 1}));
}

struct XY {
  Tensor x, y;
};

nn::Sequential build_mlp(int64_t in, const std::vector<int64_t>& hidden, int64_t out, std::string& shape) {
  nn::Sequential model;
  shape = std::to_string(in);
  int64_t width = in;
  for (int64_t h : hidden) {
    MT_CHECK(h > 0, "mlp: hidden widths must be positive, got ", h);
    model->push_back(nn::Linear(width, h));
    model->push_back(nn::ReLU());
    width = h;
    shape += "-" + std::to_string(h);
  }
  model->push_back(nn::Linear(width, out));
  shape += "-" + std::to_string(out);
  return model;
}

Tensor loss_of(const Tensor& out, const Tensor& y, bool classification) {
  return classification ? nn::functional::cross_entropy(out, y) : nn::functional::mse_loss(out, y);
}

class MlpTrainTask : public train::TrainTask {
 public:
  explicit MlpTrainTask(const MlpConfig& c) : config_(c) {
    MT_CHECK(c.batch_size > 0, "mlp: --batch-size must be positive, got ", c.batch_size);
    std::vector<int64_t> hidden = c.hidden;
    int64_t inputs = 0;
    std::string name;
    switch (c.task) {
      case MlpTask::FashionMnist:
        train_ = data::load_fashion_mnist(c.data_dir, true);
        test_ = data::load_fashion_mnist(c.data_dir, false);
        if (hidden.empty()) hidden = {256, 128};
        name = "fashion-mnist";
        break;
      case MlpTask::Csv:
        MT_CHECK(!c.csv_path.empty() && !c.target_column.empty(), "mlp: --csv needs a file and --target a column");
        std::tie(train_, test_) = train_test_split(data::read_csv(c.csv_path, c.target_column).dataset(), 0.1, c.seed);
        standardise(train_, test_);
        if (hidden.empty()) hidden = {64, 32};
        name = "csv " + c.csv_path + " -> " + c.target_column;
        break;
      case MlpTask::Synthetic:
        MT_CHECK(c.synthetic_samples >= 8, "mlp: synthetic_samples must be at least 8, got ", c.synthetic_samples);
        if (hidden.empty()) hidden = {1000, 500};  // the dense 215-1000-500-1 of the AMP benchmarks
        name = "synthetic";
        break;
    }
    classification_ = c.task == MlpTask::FashionMnist;
    inputs = c.task == MlpTask::Synthetic ? kSyntheticInputs : train_.data().size(1);
    rows_ = c.task == MlpTask::Synthetic ? c.synthetic_samples : train_.size();

    manual_seed(c.seed);
    std::string shape;
    model_ = build_mlp(inputs, hidden, classification_ ? 10 : 1, shape);
    model_.to(c.device);
    description_ = name + " " + shape;
    if (c.task == MlpTask::Synthetic)
      make_synthetic();
    else
      loader_ = std::make_unique<data::DataLoader>(
          train_, training_loader_options(c.batch_size, c.device).shuffle(true).seed(c.seed));
    if (loader_) start_ = loader_->state_dict();
  }

  nn::Module& model() override { return *model_; }
  data::DataLoader* loader() override { return loader_.get(); }
  int64_t batch_size() const override { return config_.batch_size; }
  std::string describe() const override {
    return description_ + ": " + std::to_string(train::parameter_count(*model_)) + " parameters, " + std::to_string(rows_) +
           " training rows";
  }

  std::vector<int64_t> prepare_batch() override {
    pending_ = draw();
    return shapes_key({pending_->x, pending_->y});
  }

  Tensor next_loss() override {
    XY b = pending_ ? std::move(*pending_) : draw();
    pending_.reset();
    // Data parallel: this rank's rows of the batch every rank drew.
    take_shard(b.x, b.y);
    return loss_of(model_(b.x), b.y, classification_);
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

  // Mean loss (and accuracy) over the test set, in eval mode without autograd or autocast.
  std::string evaluate() override {
    model_.eval();
    NoGradGuard no_grad;
    double loss_sum = 0;
    int64_t correct = 0, rows = 0;
    auto account = [&](const Tensor& x, const Tensor& y) {
      const Tensor out = model_(x);
      const auto n = x.size(0);
      loss_sum += loss_of(out, y, classification_).item<double>() * static_cast<double>(n);
      rows += n;
      if (!classification_) return;
      const auto pred = out.argmax(1).to(Device::cpu()).to_vector<int64_t>();
      const auto label = y.to(Device::cpu()).to_vector<int64_t>();
      for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == label[i];
    };
    if (loader_) {
      data::DataLoader test_loader(test_, data::DataLoaderOptions().batch_size(1000).device(config_.device));
      for (const data::Batch& b : test_loader) account(b.data, b.target);
    } else {
      account(test_batch_.x, test_batch_.y);
    }
    model_.train();
    test_size = rows;
    test_loss = loss_sum / static_cast<double>(rows);
    if (classification_) test_accuracy = static_cast<double>(correct) / static_cast<double>(rows);
    std::ostringstream os;
    os << std::fixed << std::setprecision(4) << "test loss " << test_loss << " on " << test_size << " rows";
    if (classification_) os << ", test accuracy " << test_accuracy;
    return os.str();
  }

  double test_loss = 0, test_accuracy = -1;
  int64_t test_size = 0;

 private:
  XY draw() {
    if (loader_) {
      const data::Batch b = loader_->next_batch();
      return {b.data, b.target};
    }
    return batches_[next_++ % batches_.size()];
  }

  // Inputs x ~ N(0, 1) and targets from a fixed random 215-32-1 tanh teacher, generated on the
  // training device: synthetic_samples / batch_size training batches, reused in turn (so the data
  // costs nothing while the loop is timed), and a test batch of 1/8 as many rows. Targets are
  // standardised with the training batches' mean and deviation.
  void make_synthetic() {
    NoGradGuard no_grad;
    Generator gen(config_.seed ^ 0x5eed7eac4e5ull);
    const TensorOptions on(config_.device);
    const Tensor w1 = randn({kSyntheticInputs, kTeacherHidden}, gen, on) / std::sqrt(double(kSyntheticInputs));
    const Tensor w2 = randn({kTeacherHidden, 1}, gen, on);
    auto make = [&](int64_t rows) {
      XY b;
      b.x = randn({rows, kSyntheticInputs}, gen, on);
      b.y = matmul(mixtrain::tanh(matmul(b.x, w1)), w2);
      return b;
    };
    const int64_t n = std::max<int64_t>(1, config_.synthetic_samples / config_.batch_size);
    std::vector<Tensor> ys;
    for (int64_t i = 0; i < n; ++i) {
      batches_.push_back(make(config_.batch_size));
      ys.push_back(batches_.back().y);
    }
    test_batch_ = make(std::max<int64_t>(1, config_.synthetic_samples / 8));
    const Tensor all = cat(ys, 0);
    const Tensor mean = all.mean();
    const Tensor stddev = (all - mean).pow(2.0).mean().sqrt();
    for (XY* b : {&test_batch_}) b->y = (b->y - mean) / stddev;
    for (XY& b : batches_) b.y = (b.y - mean) / stddev;
  }

  MlpConfig config_;
  data::TensorDataset train_, test_;
  std::unique_ptr<data::DataLoader> loader_;  // declared after train_, so destroyed before it
  std::vector<XY> batches_;
  XY test_batch_;
  size_t next_ = 0;
  nlohmann::json start_;  // the training loader's state before its first batch (seek_batches)
  std::optional<XY> pending_;  // drawn by prepare_batch for the next next_loss
  nn::Sequential model_{nullptr};
  bool classification_ = false;
  int64_t rows_ = 0;
  std::string description_;
};

}  // namespace

std::unique_ptr<train::TrainTask> make_mlp_task(const MlpConfig& config) { return std::make_unique<MlpTrainTask>(config); }

MlpResult run_mlp(const MlpConfig& config) {
  MT_CHECK(config.steps > 0, "mlp: --steps must be positive, got ", config.steps);
  MT_CHECK(config.lr > 0 && std::isfinite(config.lr), "mlp: --lr must be a positive number, got ", config.lr);
  MlpTrainTask task(config);
  MlpResult r;
  run_into(task, config, r);
  MT_CHECK(std::isfinite(r.losses.back()), "mlp: the loss became ", r.losses.back(), " at the last step; try a smaller --lr");
  r.test_loss = task.test_loss;
  r.test_accuracy = task.test_accuracy;
  r.test_size = task.test_size;
  return r;
}

}  // namespace mixtrain::examples
