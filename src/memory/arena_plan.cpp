// Arena planning over buffer lifetimes: greedy by size with best-fit gaps, the lower bound it is
// judged against, and Caffe's first-fit slots for comparison (include/mixtrain/memory/plan.h).
#include "mixtrain/memory/plan.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <utility>

#include "mixtrain/base/checked_int.h"
#include "mixtrain/base/error.h"

namespace mixtrain::memory {

namespace {

// a + b for byte counts and offsets: an arena past 2^63 - 1 bytes is an Error, not a wrap.
size_t add_bytes(size_t a, size_t b, const char* what) {
  return static_cast<size_t>(checked_add(checked_int64(a, what), checked_int64(b, what), what));
}

bool overlap_in_time(const BufferLifetime& a, const BufferLifetime& b) {
  return a.alloc_at < b.free_at && b.alloc_at < a.free_at;
}

void check_lifetimes(const std::vector<BufferLifetime>& buffers, const char* who) {
  for (size_t i = 0; i < buffers.size(); ++i)
    MT_CHECK(buffers[i].free_at >= buffers[i].alloc_at, who, ": buffer ", i, " of ", buffers[i].bytes,
             " bytes is freed at event ", buffers[i].free_at, " before it is allocated at event ",
             buffers[i].alloc_at);
}

}  // namespace

size_t aligned_plan_bytes(size_t bytes) {
  constexpr size_t a = ArenaPlan::kAlignment;
  MT_CHECK(bytes <= std::numeric_limits<size_t>::max() - a, "memory plan: a buffer of ", bytes,
           " bytes cannot be aligned to ", a);
  return (bytes + a - 1) / a * a;
}

size_t lower_bound_bytes(const std::vector<BufferLifetime>& buffers) {
  check_lifetimes(buffers, "lower_bound_bytes");
  // (time, +bytes or -bytes); at one time frees go first: [alloc_at, free_at) is half-open.
  std::vector<std::pair<int64_t, int64_t>> deltas;
  deltas.reserve(2 * buffers.size());
  for (const BufferLifetime& b : buffers) {
    if (b.free_at == b.alloc_at) continue;
    const int64_t bytes = checked_int64(aligned_plan_bytes(b.bytes), "lower_bound_bytes: a buffer");
    deltas.emplace_back(b.alloc_at, bytes);
    deltas.emplace_back(b.free_at, -bytes);
  }
  std::sort(deltas.begin(), deltas.end());
  int64_t live = 0, peak = 0;
  for (const auto& d : deltas) {
    live = checked_add(live, d.second, "lower_bound_bytes: bytes live");
    peak = std::max(peak, live);
  }
  return static_cast<size_t>(peak);
}

size_t first_fit_slot_bytes(const std::vector<BufferLifetime>& buffers) {
  check_lifetimes(buffers, "first_fit_slot_bytes");
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return buffers[a].alloc_at < buffers[b].alloc_at; });
  struct Slot {
    size_t bytes;
    int64_t busy_until;  // the current user's free_at
  };
  std::vector<Slot> slots;
  for (size_t i : order) {
    const BufferLifetime& b = buffers[i];
    const size_t bytes = aligned_plan_bytes(b.bytes);
    auto slot = std::find_if(slots.begin(), slots.end(), [&](const Slot& s) { return s.busy_until <= b.alloc_at; });
    if (slot == slots.end()) {
      slots.push_back({bytes, b.free_at});
    } else {
      slot->bytes = std::max(slot->bytes, bytes);
      slot->busy_until = b.free_at;
    }
  }
  size_t total = 0;
  for (const Slot& s : slots) total = add_bytes(total, s.bytes, "first_fit_slot_bytes: the slots");
  return total;
}

ArenaPlan plan_arena(const std::vector<BufferLifetime>& buffers) {
  check_lifetimes(buffers, "plan_arena");
  ArenaPlan plan;
  plan.offsets.assign(buffers.size(), 0);
  std::vector<size_t> bytes(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) bytes[i] = aligned_plan_bytes(buffers[i].bytes);

  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), size_t{0});
  // Largest first; among equals the earlier-born first, so plans do not depend on sort internals.
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (bytes[a] != bytes[b]) return bytes[a] > bytes[b];
    if (buffers[a].alloc_at != buffers[b].alloc_at) return buffers[a].alloc_at < buffers[b].alloc_at;
    return a < b;
  });

  std::vector<size_t> placed;  // buffer indices by ascending offset
  placed.reserve(buffers.size());
  for (size_t i : order) {
    if (bytes[i] == 0 || buffers[i].free_at == buffers[i].alloc_at) continue;  // takes no room
    size_t best = std::numeric_limits<size_t>::max(), best_gap = std::numeric_limits<size_t>::max();
    size_t end = 0;  // the highest end so far among the placed buffers live with i
    for (size_t j : placed) {
      if (!overlap_in_time(buffers[i], buffers[j])) continue;
      const size_t offset = plan.offsets[j];
      if (offset > end) {
        const size_t gap = offset - end;
        if (gap >= bytes[i] && gap < best_gap) {
          best = end;
          best_gap = gap;
        }
      }
      end = std::max(end, add_bytes(offset, bytes[j], "plan_arena: an offset"));
    }
    plan.offsets[i] = best != std::numeric_limits<size_t>::max() ? best : end;
    plan.arena_bytes = std::max(plan.arena_bytes, add_bytes(plan.offsets[i], bytes[i], "plan_arena: the arena"));
    const auto at = std::upper_bound(placed.begin(), placed.end(), plan.offsets[i],
                                     [&](size_t offset, size_t j) { return offset < plan.offsets[j]; });
    placed.insert(at, i);
  }
  plan.lower_bound_bytes = lower_bound_bytes(buffers);
  plan.first_fit_bytes = first_fit_slot_bytes(buffers);
  return plan;
}

}  // namespace mixtrain::memory
