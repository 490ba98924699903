#pragma once
// Shared by the op tests: fp64 references used by several families (matmul_ref, softmax_rows), and
// for the model ops (conv, pool/upsample, norm, embedding, attention) check_op, which runs an op
// forward and backward in one dtype and compares both with an fp64 reference written with plain
// loops in the test. The reference gradient is the numerical vector-Jacobian product of that
// reference forward (central differences in fp64), so backward is checked against the
// definition of the op, not against another implementation of its backward.
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "support/testing.h"

namespace mixtrain::testing {

using Values = std::vector<double>;
// An fp64 reference forward: input values (row-major, in the inputs' shapes) to output values.
using ReferenceFn = std::function<Values(const std::vector<Values>&)>;
using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

// d/d inputs[k] of sum(f(inputs) * gy) for each k in wrt, by central differences. The ops are
// linear or smooth in their inputs, so the truncation error is ~eps^2 and the rounding error
// ~1e-16 / eps relative: far below the fp32 tolerances this is compared with.
inline std::vector<Values> reference_vjp(const ReferenceFn& f, std::vector<Values> in, const Values& gy,
                                         const std::vector<size_t>& wrt, double eps = 1e-6) {
  std::vector<Values> grads(in.size());
  auto dot = [&](const std::vector<Values>& x) {
    const Values y = f(x);
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += y[i] * gy[i];
    return s;
  };
  for (size_t k : wrt) {
    grads[k].resize(in[k].size());
    for (size_t i = 0; i < in[k].size(); ++i) {
      const double v = in[k][i];
      in[k][i] = v + eps;
      const double plus = dot(in);
      in[k][i] = v - eps;
      const double minus = dot(in);
      in[k][i] = v;
      grads[k][i] = (plus - minus) / (2 * eps);
    }
  }
  return grads;
}

// For fp64 gradients the numerical reference itself is the limit (~1e-10 relative, see
// reference_vjp), not the kernel: the exact comparison of fp64 gradients is gradcheck's job.
inline Tolerance gradient_tolerance(DType dt) {
  return dt == kFloat64 ? Tolerance{1e-8, 1e-6, 1e-8} : tolerance_for(dt);
}

// Runs op on inputs (already in the dtype under test; the ones listed in wrt get requires_grad),
// compares the output with ref on the same (rounded) values, then backpropagates a random
// gradient and compares each gradient with reference_vjp. Gradients must come back in their
// input's dtype. tol_grad defaults to tol, loosened for fp64 as gradient_tolerance says.
inline void check_op(const std::string& what, const OpFn& op, const ReferenceFn& ref, std::vector<Tensor> inputs,
                     const std::vector<size_t>& wrt, const Tolerance& tol, std::optional<Tolerance> tol_grad = {},
                     uint64_t seed = 77) {
  SCOPED_TRACE(what);
  for (size_t k : wrt) inputs[k] = inputs[k].detach().set_requires_grad(true);
  std::vector<Values> values;
  for (const Tensor& t : inputs) values.push_back(t.defined() ? to_doubles(t) : Values{});
  Tensor out = op(inputs);
  EXPECT_TRUE(all_close(out, ref(values), tol)) << "forward";
  if (wrt.empty()) return;
  const Tensor gy = random_tensor(out.shape(), out.dtype(), seed);
  out.backward(gy);
  const std::vector<Values> expected = reference_vjp(ref, values, to_doubles(gy), wrt);
  for (size_t k : wrt) {
    const Tensor g = inputs[k].grad();
    ASSERT_TRUE(g.defined()) << "no gradient for input " << k;
    EXPECT_EQ(g.dtype(), inputs[k].dtype()) << "gradient of input " << k;
    const Tolerance tg = tol_grad ? *tol_grad : g.dtype() == kFloat64 ? gradient_tolerance(kFloat64) : tol;
    EXPECT_TRUE(all_close(g, expected[k], tg)) << "gradient of input " << k;
  }
}

// Runs a kernel into outputs that were filled with NaN first, so an element it fails to write
// shows up; returns whether every element is finite.
inline ::testing::AssertionResult all_finite(const Tensor& t) {
  const Values v = to_doubles(t);
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i])) return ::testing::AssertionFailure() << "element " << i << " is " << v[i];
  return ::testing::AssertionSuccess();
}

inline Tensor poisoned(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, TensorOptions(dtype));
  poison(t);
  return t;
}

// Row-major [m,k] x [k,n] in fp64.
inline std::vector<double> matmul_ref(const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t k, int64_t n) {
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) c[i * n + j] += a[i * k + p] * b[p * n + j];
  return c;
}

// Softmax (or log-softmax) of each of `rows` rows of n values, in fp64.
inline std::vector<double> softmax_rows(const std::vector<double>& x, int64_t rows, int64_t n, bool log) {
  std::vector<double> out(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -INFINITY, s = 0;
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, x[r * n + j]);
    for (int64_t j = 0; j < n; ++j) s += std::exp(x[r * n + j] - mx);
    for (int64_t j = 0; j < n; ++j)
      out[r * n + j] = log ? x[r * n + j] - mx - std::log(s) : std::exp(x[r * n + j] - mx) / s;
  }
  return out;
}

}  // namespace mixtrain::testing
