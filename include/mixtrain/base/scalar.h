#pragma once
// Scalar: one number that remembers whether it was a floating value, an integer or a bool, as
// libtorch's at::Scalar. What Tensor::item() returns, and what the ops that take a number
// (clamp, masked_fill, arange) read their type from: an integer bound keeps an integer tensor
// integral, a floating one makes the result floating, as PyTorch's type promotion does.
#include <cstdint>
#include <ostream>
#include <type_traits>

#include "mixtrain/base/dtype.h"
#include "mixtrain/base/half.h"

namespace mixtrain {

class Scalar {
 public:
  enum class Kind : uint8_t { Floating, Integral, Bool };

  Scalar() : Scalar(int64_t{0}) {}
  Scalar(double v) : kind_(Kind::Floating), d_(v) {}                      // NOLINT: as at::Scalar
  Scalar(float v) : kind_(Kind::Floating), d_(v) {}                       // NOLINT
  Scalar(Half v) : kind_(Kind::Floating), d_(static_cast<float>(v)) {}     // NOLINT
  Scalar(BFloat16 v) : kind_(Kind::Floating), d_(static_cast<float>(v)) {} // NOLINT
  Scalar(bool v) : kind_(Kind::Bool), i_(v ? 1 : 0) {}                    // NOLINT
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Scalar(T v) : kind_(Kind::Integral), i_(static_cast<int64_t>(v)) {}     // NOLINT

  Kind kind() const { return kind_; }
  bool isFloatingPoint() const { return kind_ == Kind::Floating; }
  // An integer; with include_bool, a bool counts as one (libtorch's isIntegral(includeBool)).
  bool isIntegral(bool include_bool) const { return kind_ == Kind::Integral || (include_bool && kind_ == Kind::Bool); }
  bool isBoolean() const { return kind_ == Kind::Bool; }
  // The dtype it is held in: float64, int64 or bool (libtorch's Scalar::type()).
  DType type() const { return kind_ == Kind::Floating ? kFloat64 : (kind_ == Kind::Bool ? kBool : kInt64); }

  double toDouble() const { return kind_ == Kind::Floating ? d_ : static_cast<double>(i_); }
  float toFloat() const { return static_cast<float>(toDouble()); }
  // Floating values are truncated toward zero, as static_cast (and libtorch) does.
  int64_t toLong() const { return kind_ == Kind::Floating ? static_cast<int64_t>(d_) : i_; }
  int32_t toInt() const { return static_cast<int32_t>(toLong()); }
  bool toBool() const { return kind_ == Kind::Floating ? d_ != 0.0 : i_ != 0; }
  // to<double>(), to<int64_t>(), ...: the value converted as static_cast would.
  template <class T>
  T to() const {
    if constexpr (std::is_same_v<T, bool>) return toBool();
    else if constexpr (std::is_integral_v<T>) return static_cast<T>(toLong());
    else return static_cast<T>(toFloat());  // Half, BFloat16 (float and double are specialised below)
  }

 private:
  Kind kind_;
  union {
    double d_;
    int64_t i_;
  };
};

template <>
inline double Scalar::to<double>() const { return toDouble(); }
template <>
inline float Scalar::to<float>() const { return toFloat(); }

// As PyTorch prints a Python number: 1.5, 3, true.
std::ostream& operator<<(std::ostream& os, const Scalar& s);

}  // namespace mixtrain
