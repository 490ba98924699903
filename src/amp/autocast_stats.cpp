// The autocast counters: relaxed atomics bumped by the hook, read as a snapshot.
#include "amp/autocast_internal.h"

#include <nlohmann/json.hpp>

namespace mixtrain::amp {

namespace detail {
Counters& counters() {
  static Counters c;
  return c;
}
}  // namespace detail

uint64_t AutocastStats::ops_of(DType dtype, CastPolicy policy) const {
  return ops[static_cast<int>(dtype)][static_cast<int>(policy)];
}

uint64_t AutocastStats::ops_by_dtype(DType dtype) const {
  uint64_t n = 0;
  for (uint64_t v : ops[static_cast<int>(dtype)]) n += v;
  return n;
}

uint64_t AutocastStats::ops_by_policy(CastPolicy policy) const {
  uint64_t n = 0;
  for (const auto& row : ops) n += row[static_cast<int>(policy)];
  return n;
}

uint64_t AutocastStats::total_ops() const {
  uint64_t n = 0;
  for (const auto& row : ops)
    for (uint64_t v : row) n += v;
  return n;
}

AutocastStats autocast_stats() {
  const detail::Counters& c = detail::counters();
  AutocastStats s;
  for (int d = 0; d < kNumDTypes; ++d)
    for (int p = 0; p < kNumCastPolicies; ++p) s.ops[d][p] = c.ops[d][p].load(std::memory_order_relaxed);
  s.casts = c.casts.load(std::memory_order_relaxed);
  s.cast_bytes = c.cast_bytes.load(std::memory_order_relaxed);
  s.cache_hits = c.cache_hits.load(std::memory_order_relaxed);
  s.cache_misses = c.cache_misses.load(std::memory_order_relaxed);
  return s;
}

void reset_autocast_stats() {
  detail::Counters& c = detail::counters();
  for (auto& row : c.ops)
    for (auto& v : row) v.store(0, std::memory_order_relaxed);
  c.casts.store(0, std::memory_order_relaxed);
  c.cast_bytes.store(0, std::memory_order_relaxed);
  c.cache_hits.store(0, std::memory_order_relaxed);
  c.cache_misses.store(0, std::memory_order_relaxed);
}

void to_json(nlohmann::json& j, const AutocastStats& s) {
  nlohmann::json ops = nlohmann::json::object(), by_dtype = nlohmann::json::object(),
                 by_policy = nlohmann::json::object();
  for (int d = 0; d < kNumDTypes; ++d) {
    const DType dt = static_cast<DType>(d);
    for (int p = 0; p < kNumCastPolicies; ++p) {
      if (s.ops[d][p] != 0) ops[dtype_name(dt)][cast_policy_name(static_cast<CastPolicy>(p))] = s.ops[d][p];
    }
    if (const uint64_t n = s.ops_by_dtype(dt)) by_dtype[dtype_name(dt)] = n;
  }
  for (int p = 0; p < kNumCastPolicies; ++p) {
    const CastPolicy cp = static_cast<CastPolicy>(p);
    if (const uint64_t n = s.ops_by_policy(cp)) by_policy[cast_policy_name(cp)] = n;
  }
  j = nlohmann::json{{"ops", ops},
                     {"ops_by_dtype", by_dtype},
                     {"ops_by_policy", by_policy},
                     {"total_ops", s.total_ops()},
                     {"casts", s.casts},
                     {"cast_bytes", s.cast_bytes},
                     {"cache_hits", s.cache_hits},
                     {"cache_misses", s.cache_misses}};
}

}  // namespace mixtrain::amp
