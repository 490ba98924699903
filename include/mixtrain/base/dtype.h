#pragma once
// Element types, their sizes and names, and PyTorch's type-promotion rule for the ones we have.
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>

namespace mixtrain {

enum class DType : uint8_t { Float32, Float16, BFloat16, Float64, Int64, Int32, Bool, Float8E4M3FN, Float8E5M2 };

constexpr DType kFloat32 = DType::Float32;
constexpr DType kFloat16 = DType::Float16;
constexpr DType kBFloat16 = DType::BFloat16;
constexpr DType kFloat64 = DType::Float64;
constexpr DType kInt64 = DType::Int64;
constexpr DType kInt32 = DType::Int32;
constexpr DType kBool = DType::Bool;
// libtorch's spellings of the same dtypes (torch::kFloat, torch::kLong, ...). The dtypes
// libtorch has and mixtrain does not (kByte, kChar, kShort, the complex types) are not aliased.
using ScalarType = DType;
constexpr DType kFloat = DType::Float32;
constexpr DType kDouble = DType::Float64;
constexpr DType kHalf = DType::Float16;
constexpr DType kLong = DType::Int64;
constexpr DType kInt = DType::Int32;
// FP8 (base/float8.h): storage, casts and scaled_mm only; arithmetic ops reject them, as PyTorch's.
constexpr DType kFloat8E4M3FN = DType::Float8E4M3FN;
constexpr DType kFloat8E5M2 = DType::Float8E5M2;

constexpr int kNumDTypes = 9;

size_t element_size(DType t);
const char* dtype_name(DType t);  // "float32", "float16", "bfloat16", ..., "float8_e4m3fn", "float8_e5m2"
DType dtype_from_name(const std::string& name);  // accepts the names above and fp32/fp16/bf16/fp64
bool is_floating(DType t);
bool is_half(DType t);  // fp16 or bf16
bool is_float8(DType t);  // float8_e4m3fn or float8_e5m2 (floating, as in PyTorch)

// PyTorch's promotion among tensors of the same category: the wider float wins, fp16 with bf16
// gives fp32, any float beats any integer, int64 beats int32 beats bool. An fp8 dtype promotes
// with nothing but itself (an Error, as in PyTorch).
DType promote_types(DType a, DType b);

std::ostream& operator<<(std::ostream& os, DType t);

}  // namespace mixtrain
