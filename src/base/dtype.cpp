#include "mixtrain/base/dtype.h"

#include "mixtrain/base/error.h"

namespace mixtrain {

size_t element_size(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Float16: return 2;
    case DType::BFloat16: return 2;
    case DType::Float64: return 8;
    case DType::Int64: return 8;
    case DType::Int32: return 4;
    case DType::Bool: return 1;
    case DType::Float8E4M3FN: return 1;
    case DType::Float8E5M2: return 1;
  }
  MT_ERROR("element_size: unknown dtype ", static_cast<int>(t));
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Float64: return "float64";
    case DType::Int64: return "int64";
    case DType::Int32: return "int32";
    case DType::Bool: return "bool";
    case DType::Float8E4M3FN: return "float8_e4m3fn";
    case DType::Float8E5M2: return "float8_e5m2";
  }
  return "unknown";
}

DType dtype_from_name(const std::string& name) {
  if (name == "float32" || name == "fp32" || name == "float") return kFloat32;
  if (name == "float16" || name == "fp16" || name == "half") return kFloat16;
  if (name == "bfloat16" || name == "bf16") return kBFloat16;
  if (name == "float64" || name == "fp64" || name == "double") return kFloat64;
  if (name == "int64" || name == "long") return kInt64;
  if (name == "int32" || name == "int") return kInt32;
  if (name == "bool") return kBool;
  if (name == "float8_e4m3fn" || name == "fp8_e4m3") return kFloat8E4M3FN;
  if (name == "float8_e5m2" || name == "fp8_e5m2") return kFloat8E5M2;
  MT_ERROR("unknown dtype name '", name,
           "' (expected float32, float16, bfloat16, float64, int64, int32, bool, float8_e4m3fn or float8_e5m2)");
}

bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16 || t == DType::Float64 || is_float8(t);
}

bool is_float8(DType t) { return t == DType::Float8E4M3FN || t == DType::Float8E5M2; }

bool is_half(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

namespace {
int float_rank(DType t) {
  switch (t) {
    case DType::Float16:
    case DType::BFloat16: return 1;
    case DType::Float32: return 2;
    case DType::Float64: return 3;
    default: return 0;
  }
}
int int_rank(DType t) {
  switch (t) {
    case DType::Bool: return 1;
    case DType::Int32: return 2;
    case DType::Int64: return 3;
    default: return 0;
  }
}
}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  MT_CHECK(!is_float8(a) && !is_float8(b), "promotion of float8 types is not supported: ", dtype_name(a), " with ",
           dtype_name(b), " (cast explicitly)");
  const bool fa = is_floating(a), fb = is_floating(b);
  if (fa && fb) {
    if (is_half(a) && is_half(b)) return kFloat32;  // fp16 with bf16: neither holds the other
    return float_rank(a) >= float_rank(b) ? a : b;
  }
  if (fa) return a;
  if (fb) return b;
  return int_rank(a) >= int_rank(b) ? a : b;
}

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

}  // namespace mixtrain
