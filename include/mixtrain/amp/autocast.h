#pragma once
// Autocast: inside an AutocastGuard scope, each op's floating inputs are cast according to the
// op's policy (amp/cast_policy.h) before autograd records the op, so lower-precision ops save
// half inputs for backward and fp32 leaves still receive fp32 gradients. See docs/AUTOCAST.md.
//
// State is per thread: enabled and dtype per device type; the cache flag and the nesting depth
// per thread (one weight-cast cache serves both device types, as in PyTorch).
#include <array>
#include <cstddef>
#include <cstdint>

#include <nlohmann/json_fwd.hpp>

#include "mixtrain/amp/cast_policy.h"
#include "mixtrain/base/device.h"
#include "mixtrain/base/dtype.h"

namespace mixtrain::amp {

// RAII autocast scope for tensors of one device type. Nests: each guard saves the previous
// enabled/dtype/cache state and restores it on exit, so an inner guard may change the dtype or
// (enabled = false) turn autocast off for a sub-region. dtype must be float16 or bfloat16
// (mixtrain::Error otherwise, even when enabled is false). Leaving the outermost guard of the
// thread drops the weight casts this thread cached.
class AutocastGuard {
 public:
  explicit AutocastGuard(DeviceType device, DType dtype = kFloat16, bool enabled = true, bool cache_enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DeviceType device_;
  bool prev_enabled_;
  DType prev_dtype_;
  bool prev_cache_enabled_;
};

bool is_autocast_enabled(DeviceType device);
// The low-precision dtype of the innermost scope for `device`; float16 outside any scope, for
// CPU and CUDA alike (the CPU backend reproduces GPU AMP; PyTorch's CPU default is bfloat16).
DType autocast_dtype(DeviceType device);
bool is_autocast_cache_enabled();

// Drops every cached weight cast, of all threads (as torch.clear_autocast_cache()). Tensors
// already produced from them keep their graphs.
void clear_autocast_cache();
// Number of cached casts (all threads); for diagnostics and tests.
size_t autocast_cache_size();

// What autocast did since the last reset, summed over all threads.
struct AutocastStats {
  // ops[dtype][policy]: ops run under an enabled scope (with at least one input on an autocast
  // device type), by the dtype they computed in after the casts and by their policy.
  std::array<std::array<uint64_t, kNumCastPolicies>, kNumDTypes> ops{};
  uint64_t casts = 0;         // cast tensors made (cache hits make none)
  uint64_t cast_bytes = 0;    // bytes of the tensors those casts produced
  uint64_t cache_hits = 0;    // weight casts reused from the cache
  uint64_t cache_misses = 0;  // cacheable weight casts made and stored

  uint64_t ops_of(DType dtype, CastPolicy policy) const;
  uint64_t ops_by_dtype(DType dtype) const;
  uint64_t ops_by_policy(CastPolicy policy) const;
  uint64_t total_ops() const;
};

AutocastStats autocast_stats();
void reset_autocast_stats();

// {"ops": {"float16": {"lower_precision": 3}, ...}, "ops_by_dtype": {...}, "ops_by_policy": {...},
//  "total_ops": n, "casts": n, "cast_bytes": n, "cache_hits": n, "cache_misses": n}; zero
// counts are left out of the nested objects. Found by ADL: nlohmann::json j = autocast_stats();
void to_json(nlohmann::json& j, const AutocastStats& stats);

}  // namespace mixtrain::amp
