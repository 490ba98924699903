#pragma once
// How many threads the CPU kernels' parallel regions use, and the governor that drops them to one
// while other processes compete for the cores (docs/CPU.md, "Threads under load").
#include <atomic>
#include <chrono>
#include <cstdint>
#include <type_traits>

#include <omp.h>

#include "backends/cpu/thread_pool.h"

namespace mixtrain::backends::cpu {

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The threads a parallel region may use when the cores are free: OMP_NUM_THREADS when the user set
// it, else OpenMP's default capped by the CPUs in the process's affinity mask (`taskset -c 0`
// gives 1). `omp_default` and `user_set` are passed in so the rule can be tested.
int choose_threads(int omp_default, int affinity_cpus, bool user_set);

// Decides, from how parallel regions went, whether they should run on one thread for a while.
// A region's calling thread reports the time it spent on its own share (`busy`) and then waiting
// for the others (`wait`). Summed over a window of region time, wait > (threads - 1) * busy means
// the region ran slower than one thread would have run all the shares: the other threads were not
// getting a core (another process, a compile) or the work is too small to split. Regions then run
// on one thread for a cool-down, after which a window on all threads probes again; each failed
// probe doubles the cool-down, up to a limit, and a good window resets it.
// Thread-safe: any thread may report and ask; the state is a few relaxed atomics.
class ThreadGovernor {
 public:
  static constexpr int64_t kWindowNs = 10'000'000;         // region time per decision
  static constexpr int64_t kFirstCooldownNs = 50'000'000;  // one thread after the first bad window
  static constexpr int64_t kMaxCooldownNs = 1'600'000'000;

  // `full`: the threads when the cores are free; `adaptive`: false keeps `full` always.
  ThreadGovernor(int full, bool adaptive) : full_(full < 1 ? 1 : full), adaptive_(adaptive && full > 1) {}

  int full() const { return full_; }
  bool adaptive() const { return adaptive_; }

  // Whether regions starting at `now` should run on one thread.
  bool serial(int64_t now) const { return adaptive_ && now < serial_until_.load(std::memory_order_relaxed); }

  // Reports a region that ran on `nt` threads, ending at `now`.
  void record(int64_t now, int nt, int64_t busy, int64_t wait);

  // Times the regions were put on one thread, and the next cool-down (for benchmarks and tests).
  int64_t serial_switches() const { return switches_.load(std::memory_order_relaxed); }
  int64_t cooldown_ns() const { return cooldown_.load(std::memory_order_relaxed); }

  // Runs the regions on one thread until `until` (the governor's own decision; tests force it).
  void hold_serial(int64_t until) { serial_until_.store(until, std::memory_order_relaxed); }

 private:
  const int full_;
  const bool adaptive_;
  std::atomic<int64_t> busy_{0}, wait_{0};  // the current window
  std::atomic<int64_t> serial_until_{0};
  std::atomic<int64_t> cooldown_{kFirstCooldownNs};
  std::atomic<int64_t> switches_{0};
};

// MIXTRAIN_CPU_ADAPTIVE's value: null or "1" is true, "0" false, anything else a clear error.
bool parse_adaptive(const char* value);

// The process's governor: full threads from choose_threads, adaptive unless OMP_NUM_THREADS is set
// or MIXTRAIN_CPU_ADAPTIVE=0.
ThreadGovernor& governor();

// Whether regions starting at `now` may use several threads (false during a serial spell). A
// serial spell runs every part on the calling thread, split as for the full count, so results
// stay bit-identical.
bool regions_parallel(int64_t now);

// The parts a region splits its work into: the full thread count, or 1 inside a region (which
// then runs on its own thread) and on a thread that asked OpenMP for one thread (a DataLoader
// worker, oneDNN's calls: omp_set_num_threads(1)).
inline int split_threads() {
  return in_region() || omp_in_parallel() || omp_get_max_threads() == 1 ? 1 : governor().full();
}

// Runs body(part, parts) for each part in [0, parts) (parts > 1): on the backend's worker threads
// (thread_pool.h), reporting the calling thread's busy and waiting time to the governor, or in
// order on this thread while the governor says so. Either way each part sees the same bounds, so
// results do not change. The first exception a part throws is rethrown once all have finished.
template <class Body>
void run_parallel(int parts, Body&& body) {
  using B = std::remove_reference_t<Body>;
  const RegionPartFn run_part = [](void* ctx, int part, int n) { (*static_cast<B*>(ctx))(part, n); };
  const int threads = regions_parallel(now_ns()) ? governor().full() : 1;
  const RegionTimes t = run_region(parts, threads, run_part, const_cast<void*>(static_cast<const void*>(&body)));
  governor().record(now_ns(), t.team, t.busy_ns, t.wait_ns);
}

}  // namespace mixtrain::backends::cpu
