#pragma once
// Compile-time mapping between C++ element types and DType.
#include <cstdint>
#include <type_traits>

#include "mixtrain/base/dtype.h"
#include "mixtrain/base/float8.h"
#include "mixtrain/base/half.h"

namespace mixtrain {

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };
template <> struct dtype_of<Half> { static constexpr DType value = DType::Float16; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::BFloat16; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::Int32; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; };
template <> struct dtype_of<Float8E4M3FN> { static constexpr DType value = DType::Float8E4M3FN; };
template <> struct dtype_of<Float8E5M2> { static constexpr DType value = DType::Float8E5M2; };

// The type arithmetic on T runs in: fp32 for the half types (as tensor cores and PyTorch's
// opmath do), T itself otherwise.
template <class T> struct acc_type { using type = T; };
template <> struct acc_type<Half> { using type = float; };
template <> struct acc_type<BFloat16> { using type = float; };
template <class T> using acc_t = typename acc_type<T>::type;

}  // namespace mixtrain
