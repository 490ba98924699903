#pragma once
// Dtype dispatch, written once for both backends: calls f(Tag<T>{}) with the storage type T of a
// DType. The backends differ only in their half types (mixtrain::Half / BFloat16 on the CPU,
// __half / __nv_bfloat16 in CUDA kernels), so each instantiates this with its pair.
#include <cstdint>
#include <utility>

#include "mixtrain/base/dtype.h"
#include "mixtrain/base/error.h"
#include "mixtrain/base/float8.h"

namespace mixtrain::backends {

template <class T>
struct Tag {
  using type = T;
};

// Half and BFloat16 are the backend's 16-bit types; `device` names the backend in the error.
template <class Half, class BFloat16, class F>
void dispatch_floating_types(DType dtype, const char* op, const char* device, F&& f) {
  switch (dtype) {
    case DType::Float32: f(Tag<float>{}); return;
    case DType::Float64: f(Tag<double>{}); return;
    case DType::Float16: f(Tag<Half>{}); return;
    case DType::BFloat16: f(Tag<BFloat16>{}); return;
    default:
      MT_ERROR(op, ": not implemented on ", device, " for dtype ", dtype,
               " (expected float32, float64, float16 or bfloat16", is_float8(dtype) ? "; fp8 tensors are for casts and scaled_mm" : "", ")");
  }
}

template <class Half, class BFloat16, class F>
void dispatch_all_types(DType dtype, const char* op, const char* device, F&& f) {
  switch (dtype) {
    case DType::Int64: f(Tag<int64_t>{}); return;
    case DType::Int32: f(Tag<int32_t>{}); return;
    case DType::Bool: f(Tag<bool>{}); return;
    default: dispatch_floating_types<Half, BFloat16>(dtype, op, device, std::forward<F>(f));
  }
}

// dispatch_all_types and the two fp8 types (one storage type each, shared by both backends): for
// the kernels that move and convert values (copy, fill).
template <class Half, class BFloat16, class F>
void dispatch_all_and_float8_types(DType dtype, const char* op, const char* device, F&& f) {
  switch (dtype) {
    case DType::Float8E4M3FN: f(Tag<Float8E4M3FN>{}); return;
    case DType::Float8E5M2: f(Tag<Float8E5M2>{}); return;
    default: dispatch_all_types<Half, BFloat16>(dtype, op, device, std::forward<F>(f));
  }
}

}  // namespace mixtrain::backends
