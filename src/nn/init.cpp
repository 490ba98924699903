// Initialisers with PyTorch's formulas (torch/nn/init.py).
#include "mixtrain/nn/init.h"

#include <cmath>

#include "mixtrain/base/error.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/nn/skip_init.h"
#include "mixtrain/ops/functional.h"

namespace mixtrain::nn::init {

namespace {

thread_local bool skip_init = false;

void check_float(const char* op, const Tensor& t) {
  MT_CHECK(t.defined(), "nn::init::", op, ": got an undefined tensor");
  MT_CHECK(is_floating(t.dtype()), "nn::init::", op, ": expected a floating tensor, got ", t.summary());
}

// Samples are drawn in fp64 on the CPU, so the values are the same whatever the tensor's dtype
// or device, and each is rounded once when copied in.
void fill_from(Tensor& t, const Tensor& values) {
  NoGradGuard no_grad;
  t.copy_(values);
}

double fan_for(const char* op, const Tensor& t, FanMode mode) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  const int64_t fan = mode == FanMode::FanIn ? fan_in : fan_out;
  MT_CHECK(fan > 0, "nn::init::", op, ": fan is zero for a tensor of shape ", t.summary());
  return static_cast<double>(fan);
}

}  // namespace

SkipInitGuard::SkipInitGuard() : previous_(skip_init) { skip_init = true; }
SkipInitGuard::~SkipInitGuard() { skip_init = previous_; }
bool is_init_skipped() { return skip_init; }

double calculate_gain(Nonlinearity nonlinearity, double param) {
  switch (nonlinearity) {
    case Nonlinearity::Linear:
    case Nonlinearity::Conv1D:
    case Nonlinearity::Conv2D:
    case Nonlinearity::Conv3D:
    case Nonlinearity::ConvTranspose1D:
    case Nonlinearity::ConvTranspose2D:
    case Nonlinearity::ConvTranspose3D:
    case Nonlinearity::Sigmoid: return 1.0;
    case Nonlinearity::Tanh: return 5.0 / 3.0;
    case Nonlinearity::ReLU: return std::sqrt(2.0);
    case Nonlinearity::LeakyReLU: return std::sqrt(2.0 / (1.0 + param * param));
    case Nonlinearity::SELU: return 3.0 / 4.0;
  }
  MT_ERROR("nn::init::calculate_gain: unknown nonlinearity ", static_cast<int>(nonlinearity));
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& tensor) {
  MT_CHECK(tensor.defined(), "nn::init::calculate_fan_in_and_fan_out: got an undefined tensor");
  MT_CHECK(tensor.dim() >= 2, "nn::init: fan in and fan out cannot be computed for a tensor with fewer than 2 ",
           "dimensions, got ", tensor.summary());
  int64_t receptive_field = 1;
  for (int64_t d = 2; d < tensor.dim(); ++d) receptive_field *= tensor.size(d);
  return {tensor.size(1) * receptive_field, tensor.size(0) * receptive_field};
}

Tensor uniform_(Tensor tensor, double low, double high) {
  check_float("uniform_", tensor);
  MT_CHECK(low <= high, "nn::init::uniform_: expected low <= high, got [", low, ", ", high, ")");
  if (skip_init) return tensor;
  Tensor u = rand(tensor.shape(), default_generator(), TensorOptions(kFloat64));
  {
    NoGradGuard no_grad;
    u = add(mul(u, high - low), low);
  }
  fill_from(tensor, u);
  return tensor;
}

Tensor normal_(Tensor tensor, double mean, double std) {
  check_float("normal_", tensor);
  MT_CHECK(std >= 0.0, "nn::init::normal_: expected std >= 0, got ", std);
  if (skip_init) return tensor;
  Tensor n = randn(tensor.shape(), default_generator(), TensorOptions(kFloat64));
  {
    NoGradGuard no_grad;
    n = add(mul(n, std), mean);
  }
  fill_from(tensor, n);
  return tensor;
}

Tensor constant_(Tensor tensor, double value) {
  check_float("constant_", tensor);
  if (skip_init) return tensor;
  NoGradGuard no_grad;
  tensor.fill_(value);
  return tensor;
}

Tensor zeros_(Tensor tensor) { return constant_(std::move(tensor), 0.0); }
Tensor ones_(Tensor tensor) { return constant_(std::move(tensor), 1.0); }

Tensor xavier_uniform_(Tensor tensor, double gain) {
  check_float("xavier_uniform_", tensor);
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(tensor);
  const double std = gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
  const double a = std::sqrt(3.0) * std;
  return uniform_(std::move(tensor), -a, a);
}

Tensor xavier_normal_(Tensor tensor, double gain) {
  check_float("xavier_normal_", tensor);
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(tensor);
  return normal_(std::move(tensor), 0.0, gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)));
}

Tensor kaiming_uniform_(Tensor tensor, double a, FanMode mode, Nonlinearity nonlinearity) {
  check_float("kaiming_uniform_", tensor);
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(fan_for("kaiming_uniform_", tensor, mode));
  const double bound = std::sqrt(3.0) * std;
  return uniform_(std::move(tensor), -bound, bound);
}

Tensor kaiming_normal_(Tensor tensor, double a, FanMode mode, Nonlinearity nonlinearity) {
  check_float("kaiming_normal_", tensor);
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(fan_for("kaiming_normal_", tensor, mode));
  return normal_(std::move(tensor), 0.0, std);
}

}  // namespace mixtrain::nn::init
