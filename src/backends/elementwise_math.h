#pragma once
// The scalar formulas of the elementwise ops, written once for both backends: the CPU loops
// (backends/cpu/elementwise.cpp) and the CUDA kernels (kernels/cuda/elementwise.cu)
// instantiate the same functions, so the two agree by construction. One row per op, forward and
// backward side by side. A is the compute type: float for fp32/fp16/bf16 data (half inputs are
// widened once and the result rounded once), double for fp64.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backends/kernel_types.h"
#include "mixtrain/base/host_device.h"

namespace mixtrain::backends::math {

// fp32 and fp64 math under one name: std:: on the host (what the CPU backend always called),
// CUDA's expf/exp pairs on the device.
#ifdef __CUDA_ARCH__
#define MT_MATH_FN(name, f32, f64)                                                          \
  template <class A>                                                                        \
  MT_HOST_DEVICE inline A name(A x) {                                                              \
    if constexpr (std::is_same_v<A, float>) return f32(x); else return f64(x);              \
  }
#else
#define MT_MATH_FN(name, f32, f64) \
  template <class A>               \
  MT_HOST_DEVICE inline A name(A x) {     \
    return std::f64(x);            \
  }
#endif
MT_MATH_FN(m_exp, expf, exp)
MT_MATH_FN(m_log, logf, log)
MT_MATH_FN(m_sqrt, sqrtf, sqrt)
MT_MATH_FN(m_tanh, tanhf, tanh)
MT_MATH_FN(m_erf, erff, erf)
MT_MATH_FN(m_abs, fabsf, fabs)
MT_MATH_FN(m_log1p, log1pf, log1p)
#undef MT_MATH_FN

// The same for functions of two arguments.
#ifdef __CUDA_ARCH__
#define MT_MATH_FN2(name, f32, f64)                                                         \
  template <class A>                                                                        \
  MT_HOST_DEVICE inline A name(A x, A y) {                                                  \
    if constexpr (std::is_same_v<A, float>) return f32(x, y); else return f64(x, y);        \
  }
#else
#define MT_MATH_FN2(name, f32, f64)        \
  template <class A>                       \
  MT_HOST_DEVICE inline A name(A x, A y) { \
    return std::f64(x, y);                 \
  }
#endif
MT_MATH_FN2(m_pow, powf, pow)
MT_MATH_FN2(m_hypot, hypotf, hypot)  // without the overflow and underflow of sqrt(x * x + y * y)
#undef MT_MATH_FN2

// erf and exp for fp32 on the host without a library call, so that the CPU's elementwise loops
// vectorize them (glibc's erff/expf are one call per element: 20 % of a bf16 transformer step went
// to GELU). The device and fp64 keep the library functions.
#ifndef __CUDA_ARCH__
// erf(x) = x P(x^2) / Q(x^2) on [-4, 4] (beyond, erf rounds to +-1 in fp32): a rational fit made for
// mixtrain (least squares on Chebyshev nodes, deg P 6, deg Q 4), at most 7.2 ulp from the exact erf
// in fp32 arithmetic, 4.3e-7 in 1 + erf (docs/CPU.md, "Vectorized erf and exp"). The clamp keeps NaN.
inline float erf_vectorizable(float x) {
  const float c = x > 4.0f ? 4.0f : (x < -4.0f ? -4.0f : x);
  const float s = c * c;
  const float p = 1.12837914f + s * (0.203697242f + s * (0.051057456f + s * (0.00384002616f +
                  s * (0.000143370175f + s * (-1.92196999e-06f + s * 1.90993023e-08f)))));
  const float q = 1.0f + s * (0.513854033f + s * (0.116541053f + s * (0.014656652f + s * 0.000983614672f)));
  return c * p / q;
}
// exp(x) = 2^n e^r, n = round(x / ln 2) by the 1.5 * 2^23 rounding trick (no float-to-int
// conversion, which NaN would make undefined), r = x - n ln 2 in two parts (Cody and Waite), e^r
// by its Taylor series to degree 7 (|r| <= ln 2 / 2: truncation below 0.1 ulp). Below -87.3 the
// result is 0 (no subnormals), above 88 about e^88 instead of inf (n stays within the normal
// exponents; GELU's pdf only ever asks for x <= 0).
inline float exp_vectorizable(float x) {
  const float c = x > 88.0f ? 88.0f : (x < -87.3f ? -87.3f : x);
  const float shifted = c * 1.44269504f + 12582912.0f;
  const float n = shifted - 12582912.0f;
  const float r = (c - n * 0.693145752f) - n * 1.42860677e-06f;
  const float e = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 +
                  r * (1.0f / 720 + r * (1.0f / 5040)))))));
  uint32_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  const uint32_t scale_bits = (bits - 0x4B400000u + 127u) << 23;
  float scale;
  std::memcpy(&scale, &scale_bits, sizeof scale);
  return x < -87.3f ? 0.0f : e * scale;  // underflow to 0 as expf, so x * pdf(x) at +-inf stays NaN
}
#endif

template <class A>
MT_HOST_DEVICE inline A gelu_erf(A z) {
#ifndef __CUDA_ARCH__
  if constexpr (std::is_same_v<A, float>) return erf_vectorizable(z);
#endif
  return m_erf(z);
}
template <class A>
MT_HOST_DEVICE inline A gelu_exp(A z) {
#ifndef __CUDA_ARCH__
  if constexpr (std::is_same_v<A, float>) return exp_vectorizable(z);
#endif
  return m_exp(z);
}

// The exact (erf) GELU: cdf and pdf of the standard normal.
template <class A>
MT_HOST_DEVICE inline A gelu_cdf(A x) { return A(0.5) * (A(1) + gelu_erf(x * A(0.70710678118654752440))); }
template <class A>
MT_HOST_DEVICE inline A gelu_pdf(A x) { return A(0.39894228040143267794) * gelu_exp(A(-0.5) * x * x); }
// SiLU's sigmoid, for its backward (PyTorch's formula: g * s * (1 + x * (1 - s))).
template <class A>
MT_HOST_DEVICE inline A silu_sigmoid(A x) { return A(1) / (A(1) + m_exp(-x)); }

// PyTorch's softplus: log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (where
// exp would overflow and the two agree to within exp(-threshold)). Its derivative is the
// sigmoid of beta x, 1 past the threshold, as PyTorch's softplus_backward.
template <class A>
MT_HOST_DEVICE inline A softplus_forward(A x, A beta, A threshold) {
  return x * beta > threshold ? x : m_log1p(m_exp(x * beta)) / beta;
}
template <class A>
MT_HOST_DEVICE inline A softplus_backward(A x, A g, A beta, A threshold) {
  const A z = m_exp(x * beta);
  return x * beta > threshold ? g : g * z / (z + A(1));
}

// ---- Unary: forward(x, alpha, beta) and backward(x, y, g, alpha, beta) = g * d op(x) / dx, from
// the forward's input x and output y (the ops layer saves only what MT_UNARY_OPS says the backward
// reads). alpha and beta are the op's scalars (UnaryScalars): pow's exponent in alpha, softplus's
// beta and threshold in alpha and beta; an op without them ignores them.
template <UnaryOp Op>
struct Unary;  // an op in MT_UNARY_OPS without a row here does not compile

#define MT_UNARY_MATH(code, forward_expr, backward_expr)                              \
  template <>                                                                         \
  struct Unary<UnaryOp::code> {                                                       \
    template <class A>                                                                \
    static MT_HOST_DEVICE inline A forward(A x, A alpha, A beta) {                    \
      (void)alpha, (void)beta;                                                        \
      return forward_expr;                                                            \
    }                                                                                 \
    template <class A>                                                                \
    static MT_HOST_DEVICE inline A backward(A x, A y, A g, A alpha, A beta) {         \
      (void)x, (void)y, (void)alpha, (void)beta;                                      \
      return backward_expr;                                                           \
    }                                                                                 \
  };

//            op       forward                          backward
MT_UNARY_MATH(Neg,     -x,                              -g)
MT_UNARY_MATH(Exp,     m_exp(x),                        g * y)
MT_UNARY_MATH(Log,     m_log(x),                        g / x)
MT_UNARY_MATH(Sqrt,    m_sqrt(x),                       g / (A(2) * y))
MT_UNARY_MATH(Rsqrt,   A(1) / m_sqrt(x),                A(-0.5) * g * y * y * y)
MT_UNARY_MATH(Tanh,    m_tanh(x),                       g * (A(1) - y * y))
MT_UNARY_MATH(Sigmoid, A(1) / (A(1) + m_exp(-x)),       g * y * (A(1) - y))
MT_UNARY_MATH(Relu,    x <= A(0) ? A(0) : x,            x > A(0) ? g : A(0))  // NaN stays NaN
MT_UNARY_MATH(Gelu,    x * gelu_cdf(x),                 g * (gelu_cdf(x) + x * gelu_pdf(x)))
MT_UNARY_MATH(Silu,    x / (A(1) + m_exp(-x)),          g * silu_sigmoid(x) * (A(1) + x * (A(1) - silu_sigmoid(x))))
MT_UNARY_MATH(Abs,     m_abs(x),                        x > A(0) ? g : (x < A(0) ? -g : A(0)))
MT_UNARY_MATH(Pow,     m_pow(x, alpha),                 alpha == A(0) ? A(0) : g * alpha * m_pow(x, alpha - A(1)))
MT_UNARY_MATH(Square,  x * x,                           A(2) * g * x)
// The gradient passes strictly inside the bound (0 on it), as PyTorch's clamp; NaN stays NaN
// (every comparison is false) and gets no gradient.
MT_UNARY_MATH(ClampMin, x < alpha ? alpha : x,          x > alpha ? g : A(0))
MT_UNARY_MATH(ClampMax, x > alpha ? alpha : x,          x < alpha ? g : A(0))
MT_UNARY_MATH(Softplus, softplus_forward(x, alpha, beta), softplus_backward(x, g, alpha, beta))
#undef MT_UNARY_MATH

// ---- Binary: apply(a, b). The gradients are composed from ops in the ops layer.
template <BinaryOp Op>
struct Binary;

#define MT_BINARY_MATH(code, expr)                            \
  template <>                                                 \
  struct Binary<BinaryOp::code> {                             \
    template <class A>                                        \
    static MT_HOST_DEVICE inline A apply(A a, A b) { return expr; }  \
  };
MT_BINARY_MATH(Add, a + b)
MT_BINARY_MATH(Sub, a - b)
MT_BINARY_MATH(Mul, a * b)
MT_BINARY_MATH(Div, a / b)
MT_BINARY_MATH(Pow, m_pow(a, b))
MT_BINARY_MATH(Maximum, (a != a || a > b) ? a : b)  // NaN propagates
MT_BINARY_MATH(Minimum, (a != a || a < b) ? a : b)
MT_BINARY_MATH(Hypot, m_hypot(a, b))
#undef MT_BINARY_MATH

// ---- Comparisons: apply(a, b) -> bool.
template <CompareOp Op>
struct Compare;

#define MT_COMPARE_MATH(code, expr)                              \
  template <>                                                    \
  struct Compare<CompareOp::code> {                              \
    template <class A>                                           \
    static MT_HOST_DEVICE inline bool apply(A a, A b) { return expr; }  \
  };
MT_COMPARE_MATH(Eq, a == b)
MT_COMPARE_MATH(Ne, a != b)
MT_COMPARE_MATH(Lt, a < b)
MT_COMPARE_MATH(Le, a <= b)
MT_COMPARE_MATH(Gt, a > b)
MT_COMPARE_MATH(Ge, a >= b)
#undef MT_COMPARE_MATH

}  // namespace mixtrain::backends::math
