#pragma once
// Parameter initialisers (torch.nn.init). Each fills `tensor` in place under NoGradGuard, draws
// from mixtrain::default_generator() (so manual_seed makes them reproducible), samples in fp64
// and rounds once to the tensor's dtype, and returns the tensor.
#include <cstdint>
#include <utility>

#include "mixtrain/core/tensor.h"

namespace mixtrain::nn::init {

enum class Nonlinearity { Linear, Conv1D, Conv2D, Conv3D, ConvTranspose1D, ConvTranspose2D, ConvTranspose3D,
                          Sigmoid, Tanh, ReLU, LeakyReLU, SELU };
enum class FanMode { FanIn, FanOut };

// The recommended gain for a nonlinearity (torch.nn.init.calculate_gain): 1 for linear, conv and
// sigmoid; 5/3 for tanh; sqrt(2) for relu; sqrt(2 / (1 + slope^2)) for leaky_relu (param is the
// negative slope, PyTorch's default 0.01); 3/4 for selu.
double calculate_gain(Nonlinearity nonlinearity, double param = 0.01);

// (fan_in, fan_out) of a weight of at least 2 dims: [out, in, k...] gives in * prod(k) and
// out * prod(k) (PyTorch's _calculate_fan_in_and_fan_out).
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& tensor);

Tensor uniform_(Tensor tensor, double low = 0.0, double high = 1.0);
Tensor normal_(Tensor tensor, double mean = 0.0, double std = 1.0);
Tensor constant_(Tensor tensor, double value);
Tensor zeros_(Tensor tensor);
Tensor ones_(Tensor tensor);

// U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)).
Tensor xavier_uniform_(Tensor tensor, double gain = 1.0);
// N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(Tensor tensor, double gain = 1.0);
// U(-b, b) with b = gain(nonlinearity, a) * sqrt(3 / fan), fan picked by mode.
Tensor kaiming_uniform_(Tensor tensor, double a = 0.0, FanMode mode = FanMode::FanIn,
                        Nonlinearity nonlinearity = Nonlinearity::LeakyReLU);
// N(0, std^2) with std = gain(nonlinearity, a) / sqrt(fan).
Tensor kaiming_normal_(Tensor tensor, double a = 0.0, FanMode mode = FanMode::FanIn,
                       Nonlinearity nonlinearity = Nonlinearity::LeakyReLU);

}  // namespace mixtrain::nn::init
