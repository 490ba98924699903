// The CPU backend's thread count and the governor that falls back to one thread under load.
#include "backends/cpu/threads.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "mixtrain/base/error.h"

namespace mixtrain::backends::cpu {

int choose_threads(int omp_default, int affinity_cpus, bool user_set) {
  if (user_set || affinity_cpus < 1) return std::max(1, omp_default);
  return std::max(1, std::min(omp_default, affinity_cpus));
}

void ThreadGovernor::record(int64_t now, int nt, int64_t busy, int64_t wait) {
  if (!adaptive_ || nt < 2) return;
  const int64_t b = busy_.fetch_add(busy, std::memory_order_relaxed) + busy;
  const int64_t w = wait_.fetch_add(wait, std::memory_order_relaxed) + wait;
  if (b + w < kWindowNs) return;
  // Whoever closes the window decides; a report racing with the reset only moves to the next one.
  const int64_t wb = busy_.exchange(0, std::memory_order_relaxed);
  const int64_t ww = wait_.exchange(0, std::memory_order_relaxed);
  if (wb + ww == 0) return;  // another thread closed it
  if (ww > (nt - 1) * wb) {
    const int64_t cooldown = cooldown_.load(std::memory_order_relaxed);
    serial_until_.store(now + cooldown, std::memory_order_relaxed);
    cooldown_.store(std::min(2 * cooldown, kMaxCooldownNs), std::memory_order_relaxed);
    switches_.fetch_add(1, std::memory_order_relaxed);
  } else {
    cooldown_.store(kFirstCooldownNs, std::memory_order_relaxed);
  }
}

namespace {

int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;  // unknown: OpenMP's default stands
  return CPU_COUNT(&set);
}

}  // namespace

bool parse_adaptive(const char* value) {
  if (value == nullptr) return true;
  MT_CHECK(std::strcmp(value, "0") == 0 || std::strcmp(value, "1") == 0,
           "MIXTRAIN_CPU_ADAPTIVE must be 0 (a fixed thread count) or 1 (one thread while the cores are busy), got '",
           value, "'");
  return value[0] == '1';
}

bool regions_parallel(int64_t now) { return !governor().serial(now); }

ThreadGovernor& governor() {
  static ThreadGovernor g = [] {
    const bool user_set = std::getenv("OMP_NUM_THREADS") != nullptr;
    const int full = choose_threads(omp_get_max_threads(), affinity_cpus(), user_set);
    return ThreadGovernor(full, parse_adaptive(std::getenv("MIXTRAIN_CPU_ADAPTIVE")) && !user_set);
  }();
  return g;
}

}  // namespace mixtrain::backends::cpu
