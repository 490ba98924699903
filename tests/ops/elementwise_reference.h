#pragma once
// The fp64 reference of every elementwise op: one row per entry of the op lists in
// mixtrain/base/elementwise_ops.h, written with <cmath> and nothing of the library. The table-driven
// test (test_elementwise_table.cpp) walks the lists and fails, naming the op, where a row is
// missing; a new op needs its row here and nothing else in the tests.
#include <cmath>
#include <optional>

#include "backends/kernel_types.h"

namespace mixtrain::testing {

// f(x, alpha, beta) on [lo, hi]; alpha and beta are the op's scalars, the values every walk calls
// it with (pow's exponent; softplus's beta and threshold, not the defaults, so a scalar the kernel
// ignored would show). Derivatives are taken numerically from f, so a row states the op's
// definition once.
struct UnaryReference {
  double (*f)(double x, double alpha, double beta);
  double lo, hi;
  double alpha = 0.0, beta = 0.0;
};

inline std::optional<UnaryReference> unary_reference(backends::UnaryOp op) {
  using backends::UnaryOp;
  switch (op) {  // no default: a missing case is also a compiler warning (-Wswitch)
    case UnaryOp::Neg: return UnaryReference{[](double x, double, double) { return -x; }, -2, 2};
    case UnaryOp::Exp: return UnaryReference{[](double x, double, double) { return std::exp(x); }, -3, 3};
    case UnaryOp::Log: return UnaryReference{[](double x, double, double) { return std::log(x); }, 0.1, 5};
    case UnaryOp::Sqrt: return UnaryReference{[](double x, double, double) { return std::sqrt(x); }, 0.1, 5};
    case UnaryOp::Rsqrt: return UnaryReference{[](double x, double, double) { return 1 / std::sqrt(x); }, 0.1, 5};
    case UnaryOp::Tanh: return UnaryReference{[](double x, double, double) { return std::tanh(x); }, -3, 3};
    case UnaryOp::Sigmoid: return UnaryReference{[](double x, double, double) { return 1 / (1 + std::exp(-x)); }, -4, 4};
    case UnaryOp::Relu: return UnaryReference{[](double x, double, double) { return x > 0 ? x : 0.0; }, -2, 2};
    case UnaryOp::Gelu:
      return UnaryReference{[](double x, double, double) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, -3, 3};
    case UnaryOp::Silu: return UnaryReference{[](double x, double, double) { return x / (1 + std::exp(-x)); }, -4, 4};
    case UnaryOp::Abs: return UnaryReference{[](double x, double, double) { return std::abs(x); }, -2, 2};
    case UnaryOp::Pow: return UnaryReference{[](double x, double a, double) { return std::pow(x, a); }, 0.1, 3, 1.7};
    case UnaryOp::Square: return UnaryReference{[](double x, double, double) { return x * x; }, -2, 2};
    case UnaryOp::ClampMin: return UnaryReference{[](double x, double a, double) { return x < a ? a : x; }, -2, 2, 0.3};
    case UnaryOp::ClampMax: return UnaryReference{[](double x, double a, double) { return x > a ? a : x; }, -2, 2, -0.4};
    // beta 2, threshold 7.7: x > 3.85 takes the linear branch, as in PyTorch. 3.85 is on no dtype's
    // grid, so no rounded input sits on the small jump there (a numerical derivative across it).
    case UnaryOp::Softplus:
      return UnaryReference{[](double x, double b, double t) { return x * b > t ? x : std::log1p(std::exp(x * b)) / b; },
                            -4, 6, 2.0, 7.7};
  }
  return std::nullopt;
}

struct BinaryReference {
  double (*f)(double a, double b);
  double lo, hi;
};

inline std::optional<BinaryReference> binary_reference(backends::BinaryOp op) {
  using backends::BinaryOp;
  switch (op) {
    case BinaryOp::Add: return BinaryReference{[](double a, double b) { return a + b; }, -2, 2};
    case BinaryOp::Sub: return BinaryReference{[](double a, double b) { return a - b; }, -2, 2};
    case BinaryOp::Mul: return BinaryReference{[](double a, double b) { return a * b; }, -2, 2};
    case BinaryOp::Div: return BinaryReference{[](double a, double b) { return a / b; }, 0.5, 2};
    case BinaryOp::Pow: return BinaryReference{[](double a, double b) { return std::pow(a, b); }, 0.5, 2};
    case BinaryOp::Maximum: return BinaryReference{[](double a, double b) { return a > b ? a : b; }, -2, 2};
    case BinaryOp::Minimum: return BinaryReference{[](double a, double b) { return a < b ? a : b; }, -2, 2};
    case BinaryOp::Hypot: return BinaryReference{[](double a, double b) { return std::sqrt(a * a + b * b); }, -2, 2};
  }
  return std::nullopt;
}

using CompareReference = bool (*)(double a, double b);

inline std::optional<CompareReference> compare_reference(backends::CompareOp op) {
  using backends::CompareOp;
  switch (op) {
    case CompareOp::Eq: return CompareReference{[](double a, double b) { return a == b; }};
    case CompareOp::Ne: return CompareReference{[](double a, double b) { return a != b; }};
    case CompareOp::Lt: return CompareReference{[](double a, double b) { return a < b; }};
    case CompareOp::Le: return CompareReference{[](double a, double b) { return a <= b; }};
    case CompareOp::Gt: return CompareReference{[](double a, double b) { return a > b; }};
    case CompareOp::Ge: return CompareReference{[](double a, double b) { return a >= b; }};
  }
  return std::nullopt;
}

}  // namespace mixtrain::testing
