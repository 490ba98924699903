#include "support/testing.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <sstream>

namespace mixtrain::testing {

Tolerance tolerance_for(DType dtype) {
  switch (dtype) {
    case DType::Float64: return {1e-12, 1e-10, 1e-12};
    case DType::Float32: return {1e-5, 1e-4, 1e-6};
    case DType::Float16: return {1e-3, 1e-2, 1e-3};
    case DType::BFloat16: return {1e-2, 5e-2, 1e-2};
    default: return {0, 0, 0};
  }
}

Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double lo, double hi) {
  Generator gen(seed);
  NoGradGuard no_grad;
  Tensor u = rand(shape, gen, TensorOptions(kFloat64));
  return add(mul(u, hi - lo), lo).to(dtype);
}

void poison(Tensor& t) {
  NoGradGuard no_grad;
  t.fill_(is_floating(t.dtype()) ? std::nan("") : -12345.0);
}

std::vector<double> to_doubles(const Tensor& t) {
  NoGradGuard no_grad;
  return t.detach().to_vector<double>();
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = t.to(Device::cpu()).contiguous();  // a device tensor's bytes are not the host's to read
  const auto* p = static_cast<const uint8_t*>(c.raw_data());
  return std::vector<uint8_t>(p, p + c.nbytes());
}

std::vector<std::string> names_of(const std::map<std::string, Tensor>& named) {
  std::vector<std::string> out;
  for (const auto& [n, t] : named) out.push_back(n);
  return out;
}

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> out;
  for (const auto& [n, t] : named) out.push_back(n);
  return out;
}

const std::vector<DType>& float_types() {
  static const std::vector<DType> types{kFloat32, kFloat64, kFloat16, kBFloat16};
  return types;
}

::testing::AssertionResult error_contains(const std::string& message, const std::vector<std::string>& parts) {
  std::ostringstream wanted;
  for (const std::string& p : parts) wanted << " \"" << p << "\"";
  if (message == kNoError)
    return ::testing::AssertionFailure() << "no mixtrain::Error thrown; expected one containing" << wanted.str();
  std::ostringstream lacks;
  for (const std::string& p : parts)
    if (message.find(p) == std::string::npos) lacks << " \"" << p << "\"";
  if (lacks.str().empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "the error message lacks" << lacks.str() << ": " << message;
}

::testing::AssertionResult all_close(const Tensor& out, const std::vector<double>& ref, const Tolerance& tol) {
  const std::vector<double> got = to_doubles(out);
  if (got.size() != ref.size())
    return ::testing::AssertionFailure() << "size mismatch: got " << got.size() << " expected " << ref.size();
  double diff2 = 0, ref2 = 0, worst_abs = 0, worst_rel = 0, ref_max = 0;
  int shown = 0;
  std::ostringstream bad;
  int64_t failures = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(got[i] - ref[i]);
    const bool ok = !std::isnan(got[i]) && d <= tol.atol + tol.rtol * std::abs(ref[i]);
    if (!std::isnan(got[i])) {
      diff2 += d * d;
      worst_abs = std::max(worst_abs, d);
      if (ref[i] != 0) worst_rel = std::max(worst_rel, d / std::abs(ref[i]));
    }
    ref2 += ref[i] * ref[i];
    ref_max = std::max(ref_max, std::abs(ref[i]));
    if (!ok) {
      ++failures;
      if (shown++ < 5) bad << "  [" << i << "] got " << got[i] << " expected " << ref[i] << "\n";
    }
  }
  const double norm_err = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  // A reference that is zero at this tolerance (every element within atol of 0: a gradient that
  // vanishes, computed in fp64 as a difference of equal terms) gives a relative norm no scale;
  // the elementwise check alone bounds such a result.
  const bool zero_at_tolerance = ref_max <= tol.atol;
  if (failures == 0 && (norm_err <= tol.norm_rtol || zero_at_tolerance)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << failures << " of " << got.size() << " elements out of tolerance, norm error "
                                       << norm_err << " (allowed " << tol.norm_rtol << "), worst abs " << worst_abs
                                       << ", worst rel " << worst_rel << "\n"
                                       << bad.str();
}

::testing::AssertionResult all_close(const Tensor& out, const Tensor& ref, const Tolerance& tol) {
  if (out.shape() != ref.shape())
    return ::testing::AssertionFailure() << "shape mismatch: " << shape_str(out.shape()) << " vs " << shape_str(ref.shape());
  return all_close(out, to_doubles(ref), tol);
}

::testing::AssertionResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                                     std::vector<Tensor> inputs, double eps, double rtol, double atol) {
  for (auto& t : inputs) {
    if (t.defined() && is_floating(t.dtype())) {
      if (t.dtype() != kFloat64)
        return ::testing::AssertionFailure() << "gradcheck needs fp64 inputs, got " << t.summary();
      t.set_requires_grad(true);
      t.set_grad(Tensor());  // the caller may reuse the tensor across checks
    }
  }
  Tensor out = fn(inputs);
  const Tensor weights = random_tensor(out.shape(), kFloat64, 1234, 0.5, 1.5);
  auto scalar = [&](const std::vector<Tensor>& in) {
    NoGradGuard no_grad;
    return mul(fn(in), weights).sum().item<double>();
  };
  mul(out, weights).sum().backward();

  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& t = inputs[k];
    if (!t.defined() || !t.requires_grad()) continue;
    Tensor grad = t.grad();
    std::vector<double> analytic = grad.defined() ? to_doubles(grad) : std::vector<double>(t.numel(), 0.0);
    // Perturb a contiguous copy element by element; non-contiguous inputs keep their layout by
    // writing through the original view.
    Tensor base = t.detach();
    std::vector<double> values = to_doubles(base);
    for (int64_t i = 0; i < t.numel(); ++i) {
      auto with_value = [&](double v) {
        std::vector<double> copy = values;
        copy[i] = v;
        NoGradGuard no_grad;
        base.copy_(from_vector(copy, t.shape()));
        std::vector<Tensor> in = inputs;
        for (auto& x : in)
          if (x.defined()) x = x.detach();
        return scalar(in);
      };
      const double plus = with_value(values[i] + eps), minus = with_value(values[i] - eps);
      {
        NoGradGuard no_grad;
        base.copy_(from_vector(values, t.shape()));
      }
      const double numeric = (plus - minus) / (2 * eps);
      if (std::abs(numeric - analytic[i]) > atol + rtol * std::abs(numeric) + 1e-6 * std::abs(numeric)) {
        return ::testing::AssertionFailure() << "input " << k << " element " << i << ": autograd " << analytic[i]
                                             << " vs finite difference " << numeric;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

TempDir::TempDir(const std::string& prefix) {
  std::string t = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
  MT_CHECK(::mkdtemp(t.data()) != nullptr, "TempDir: mkdtemp failed for ", t);
  path = t;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

}  // namespace mixtrain::testing
