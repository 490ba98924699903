#pragma once
// What the cuBLASLt callers (matmul.cpp, fp8.cpp) share: a dtype as cuBLASLt's data type, a
// pointer's alignment as the matmul preferences take it, and the cache of their plans.
#include <library_types.h>

#include <cstdint>
#include <map>
#include <mutex>

#include "mixtrain/base/dtype.h"
#include "mixtrain/base/error.h"

namespace mixtrain::backends::cuda {

inline cudaDataType_t lt_data_type(DType dt, const char* op) {
  switch (dt) {
    case DType::Float32: return CUDA_R_32F;
    case DType::Float16: return CUDA_R_16F;
    case DType::BFloat16: return CUDA_R_16BF;
    case DType::Float64: return CUDA_R_64F;
    case DType::Float8E4M3FN: return CUDA_R_8F_E4M3;
    case DType::Float8E5M2: return CUDA_R_8F_E5M2;
    default: MT_ERROR(op, ": not implemented on CUDA for dtype ", dt);
  }
}

// The largest power of two up to 256 that divides the address.
inline int pointer_alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  int a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

// cuBLASLt plans (descriptors, layouts, the chosen algorithm) by key, one cache per plan type.
// Callers hold `mutex` through the launch: the pointers they set on a shared descriptor (bias,
// scales) are per call. Never destroyed: plans live as long as the process.
template <class Key, class Plan>
struct LtPlanCache {
  std::mutex mutex;
  std::map<Key, Plan> plans;

  static LtPlanCache& instance() {
    static auto* cache = new LtPlanCache();
    return *cache;
  }
};

}  // namespace mixtrain::backends::cuda
