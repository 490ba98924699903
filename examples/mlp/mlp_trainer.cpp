#include "mlp/mlp_trainer.h"

#include <chrono>
#include <cmath>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "common/csv.h"

namespace mt = mixtrain;

namespace mixtrain::examples {

namespace {

// A minimal Adam (PyTorch's update, no weight decay) standing in while mixtrain::optim is being
// written. To switch, replace the two lines marked OPTIMIZER in run_mlp with
//   mt::optim::AdamW opt(model.parameters(), mt::optim::AdamWOptions().lr(config.lr));
// and delete this class: the loop calls only zero_grad() and step(), as it will on AdamW.
class MiniAdam {
 public:
  MiniAdam(std::vector<Tensor> params, double lr) : params_(std::move(params)), lr_(lr) {
    for (const auto& p : params_) {
      m_.push_back(mt::zeros(p.shape(), p.dtype()));
      v_.push_back(mt::zeros(p.shape(), p.dtype()));
    }
  }
  void zero_grad() {
    for (auto& p : params_) p.impl()->grad.reset();  // set_to_none, as PyTorch's default
  }
  void step() {
    mt::NoGradGuard no_grad;
    ++t_;
    const double c1 = 1.0 - std::pow(kBeta1, static_cast<double>(t_));
    const double c2 = 1.0 - std::pow(kBeta2, static_cast<double>(t_));
    for (size_t i = 0; i < params_.size(); ++i) {
      const Tensor g = params_[i].grad();
      if (!g.defined()) continue;
      m_[i].mul_(kBeta1).add_(g, 1.0 - kBeta1);
      v_[i].mul_(kBeta2).add_(mt::square(g), 1.0 - kBeta2);
      // p -= lr * (m / c1) / (sqrt(v / c2) + eps)
      const Tensor denom = mt::add(mt::sqrt(mt::div(v_[i], c2)), kEps);
      params_[i].add_(mt::div(m_[i], denom), -lr_ / c1);
    }
  }

 private:
  static constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8;
  std::vector<Tensor> params_, m_, v_;
  double lr_;
  int64_t t_ = 0;
};

// Inputs x ~ N(0, 1); target = teacher(x) with a fixed random 215-32-1 tanh teacher.
Dataset synthetic_regression(int64_t rows, uint64_t seed) {
  constexpr int64_t kInputs = 215, kTeacherHidden = 32;
  mt::Generator gen(seed ^ 0x5eed7eac4e5ull);
  mt::NoGradGuard no_grad;
  const Tensor x = mt::randn({rows, kInputs}, gen);
  const Tensor w1 = mt::div(mt::randn({kInputs, kTeacherHidden}, gen), std::sqrt(double(kInputs)));
  const Tensor w2 = mt::randn({kTeacherHidden, 1}, gen);
  const Tensor y = mt::matmul(mt::tanh(mt::matmul(x, w1)), w2);
  Dataset d;
  d.size = rows;
  d.features = kInputs;
  d.x = x.to_vector<float>();
  d.targets = y.to_vector<float>();
  return d;
}

// Standardises features with the training set's statistics, and for regression the target
// too, so one learning rate suits any CSV's units.
void standardise(Dataset& train, Dataset& test, bool features) {
  if (features) {
    const Standardizer s = Standardizer::fit(train.x, train.features);
    s.apply(train.x);
    s.apply(test.x);
  }
  if (!train.is_classification()) {
    const Standardizer s = Standardizer::fit(train.targets, 1);
    s.apply(train.targets);
    s.apply(test.targets);
  }
}

mt::nn::Sequential build_mlp(int64_t in, const std::vector<int64_t>& hidden, int64_t out, std::string& shape) {
  mt::nn::Sequential model;
  shape = std::to_string(in);
  int64_t width = in;
  for (int64_t h : hidden) {
    MT_CHECK(h > 0, "mlp: hidden widths must be positive, got ", h);
    model->push_back(mt::nn::Linear(width, h));
    model->push_back(mt::nn::ReLU());
    width = h;
    shape += "-" + std::to_string(h);
  }
  model->push_back(mt::nn::Linear(width, out));
  shape += "-" + std::to_string(out);
  return model;
}

Tensor loss_of(const Tensor& out, const Tensor& y, bool classification) {
  return classification ? mt::nn::functional::cross_entropy(out, y) : mt::nn::functional::mse_loss(out, y);
}

// Mean loss and accuracy over a dataset, in eval mode without autograd.
void evaluate(mt::nn::Sequential& model, const Dataset& data, MlpResult& r) {
  model.eval();
  mt::NoGradGuard no_grad;
  BatchIterator it(data, 1000, 0, /*shuffle=*/false);
  Batch b;
  double loss_sum = 0;
  int64_t correct = 0;
  while (it.next(b)) {
    const Tensor out = model(b.x);
    const double n = static_cast<double>(b.x.size(0));
    loss_sum += loss_of(out, b.y, data.is_classification()).item<float>() * n;
    if (data.is_classification()) {
      const auto pred = out.argmax(1).to_vector<int64_t>();
      const auto label = b.y.to_vector<int64_t>();
      for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == label[i];
    }
  }
  r.test_size = data.size;
  r.test_loss = loss_sum / static_cast<double>(data.size);
  if (data.is_classification()) r.test_accuracy = static_cast<double>(correct) / static_cast<double>(data.size);
  model.train();
}

}  // namespace

MlpResult run_mlp(const MlpConfig& config) {
  MT_CHECK(config.steps > 0, "mlp: --steps must be positive, got ", config.steps);
  MT_CHECK(config.batch_size > 0, "mlp: --batch-size must be positive, got ", config.batch_size);
  MT_CHECK(config.lr > 0 && std::isfinite(config.lr), "mlp: --lr must be a positive number, got ", config.lr);

  Dataset train, test;
  std::vector<int64_t> hidden = config.hidden;
  std::string name;
  switch (config.task) {
    case MlpTask::FashionMnist:
      train = load_fashion_mnist(config.data_dir, true);
      test = load_fashion_mnist(config.data_dir, false);
      if (hidden.empty()) hidden = {256, 128};
      name = "fashion-mnist";
      break;
    case MlpTask::Csv: {
      MT_CHECK(!config.csv_path.empty() && !config.target_column.empty(), "mlp: --csv needs a file and --target a column");
      std::tie(train, test) = train_test_split(read_csv(config.csv_path, config.target_column), 0.1, config.seed);
      standardise(train, test, true);
      if (hidden.empty()) hidden = {64, 32};
      name = "csv " + config.csv_path + " -> " + config.target_column;
      break;
    }
    case MlpTask::Synthetic: {
      MT_CHECK(config.synthetic_samples >= 8, "mlp: synthetic_samples must be at least 8");
      std::tie(train, test) = train_test_split(
          synthetic_regression(config.synthetic_samples + config.synthetic_samples / 8, config.seed), 1.0 / 9, config.seed);
      standardise(train, test, false);
      if (hidden.empty()) hidden = {1000, 500};  // the dense 215-1000-500-1 of the AMP benchmarks
      name = "synthetic";
      break;
    }
  }
  const bool classification = train.is_classification();
  const int64_t outputs = classification ? 10 : 1;

  mt::manual_seed(config.seed);
  std::string shape;
  mt::nn::Sequential model = build_mlp(train.features, hidden, outputs, shape);
  MiniAdam opt(model.parameters(), config.lr);  // OPTIMIZER: mt::optim::AdamW, see MiniAdam
  BatchIterator loader(train, config.batch_size, config.seed);

  MlpResult r;
  r.description = name + " " + shape;
  for (const auto& p : model.parameters()) r.parameters += p.numel();
  if (config.log)
    *config.log << r.description << ": " << r.parameters << " parameters, " << train.size << " training rows, batch "
                << config.batch_size << ", " << config.steps << " steps" << std::endl;

  const auto start = std::chrono::steady_clock::now();
  double window = 0;
  int64_t in_window = 0;
  for (int64_t step = 1; step <= config.steps; ++step) {
    const Batch b = loader.next_batch();
    opt.zero_grad();
    const Tensor loss = loss_of(model(b.x), b.y, classification);
    loss.backward();
    opt.step();
    const double l = loss.item<float>();
    MT_CHECK(std::isfinite(l), "mlp: the loss became ", l, " at step ", step, "; try a smaller --lr");
    r.losses.push_back(l);
    window += l;
    ++in_window;
    // Step 1 alone shows the starting loss; later lines average the steps since the last one.
    if (config.log && config.log_every > 0 && (step == 1 || step % config.log_every == 0 || step == config.steps)) {
      const double n = static_cast<double>(in_window);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      *config.log << "step " << std::setw(6) << step << "  loss " << std::fixed << std::setprecision(4)
                  << window / n << "  (" << std::setprecision(1)
                  << static_cast<double>(step) / secs << " steps/s)" << std::defaultfloat << std::endl;
      window = 0;
      in_window = 0;
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  evaluate(model, test, r);
  if (config.log) {
    *config.log << std::fixed << std::setprecision(4) << "test loss " << r.test_loss << " on " << r.test_size
                << " rows";
    if (classification) *config.log << ", test accuracy " << r.test_accuracy;
    *config.log << std::setprecision(1) << "; trained in " << r.seconds << " s" << std::defaultfloat << std::endl;
  }
  return r;
}

}  // namespace mixtrain::examples
