// The CPU backend's worker threads (thread_pool.h): a spin of a few microseconds, then a futex.
#include "backends/cpu/thread_pool.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <exception>
#include <mutex>
#include <thread>

#include "backends/cpu/threads.h"

namespace mixtrain::backends::cpu {

namespace {

// How long a waiting thread spins before it sleeps. Back-to-back regions of a training step
// follow each other within microseconds, so the workers are still awake for the next one; a
// thread waiting for one that has no core gives up its own after this.
constexpr int64_t kSpinNs = 20'000;

void futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Spins until word != value or kSpinNs pass; returns whether it changed.
bool spin_while_equal(const std::atomic<uint32_t>& word, uint32_t value) {
  const int64_t until = now_ns() + kSpinNs;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (word.load(std::memory_order_acquire) != value) return true;
      cpu_relax();
    }
    if (now_ns() >= until) return false;
  }
}

thread_local bool tls_in_region = false;

// A spin lock that a forked child can reset (a std::mutex held by a parent's thread cannot be).
class Flag {
 public:
  bool try_lock() { return !held_.exchange(true, std::memory_order_acquire); }
  void lock() {
    while (!try_lock()) std::this_thread::yield();
  }
  void unlock() { held_.store(false, std::memory_order_release); }
  void reset() { held_.store(false, std::memory_order_relaxed); }

 private:
  std::atomic<bool> held_{false};
};

class Pool {
 public:
  // Started on first use with `workers` threads; never stopped (a process ends with them asleep).
  void ensure(int workers) {
    if (started_.load(std::memory_order_acquire) >= workers) return;
    std::lock_guard<Flag> lock(start_);
    // A worker starts from the word as it is now, before the caller publishes its region: read in
    // the new thread, it could already hold that region, which would then never run.
    const uint32_t seen = word_.load(std::memory_order_acquire);
    for (int index = started_.load(std::memory_order_relaxed); index < workers; ++index)
      std::thread([this, index, seen] { work(index, seen); }).detach();
    started_.store(workers, std::memory_order_release);
  }

  // Runs a region on the caller and team - 1 workers (team <= workers + 1). Returns false, having
  // run nothing, when another thread's region holds the workers.
  bool run(int parts, int team, RegionPartFn fn, void* ctx, RegionTimes& times) {
    std::unique_lock<Flag> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    fn_ = fn;
    ctx_ = ctx;
    parts_ = parts;
    failure_ = nullptr;
    failed_.store(false, std::memory_order_relaxed);
    pending_.store(static_cast<uint32_t>(team - 1), std::memory_order_relaxed);
    // The team rides in the word the workers wait on, so a worker outside it never reads the
    // fields above (which the next region may be writing).
    const uint32_t next = ((word_.load(std::memory_order_relaxed) >> kTeamBits) + 1) << kTeamBits;
    word_.store(next | static_cast<uint32_t>(team), std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) futex_wake_all(word_);

    const int64_t start = now_ns();
    run_parts(0, team);
    const int64_t done = now_ns();
    for (;;) {
      const uint32_t left = pending_.load(std::memory_order_acquire);
      if (left == 0) break;
      if (spin_while_equal(pending_, left)) continue;
      caller_sleeping_.store(true, std::memory_order_seq_cst);
      if (pending_.load(std::memory_order_seq_cst) == left) futex_wait(pending_, left);
      caller_sleeping_.store(false, std::memory_order_relaxed);
    }
    times = {team, done - start, now_ns() - done};
    if (failed_.load(std::memory_order_acquire)) std::rethrow_exception(failure_);
    return true;
  }

  // A forked child has none of the parent's threads: the next region starts new ones.
  void forget_threads() {
    start_.reset();
    busy_.reset();
    started_.store(0, std::memory_order_relaxed);
    sleepers_.store(0, std::memory_order_relaxed);
    caller_sleeping_.store(false, std::memory_order_relaxed);
  }

  static constexpr int kMaxThreads = 255;  // the team's bits in word_

 private:
  static constexpr int kTeamBits = 8;

  void run_parts(int t, int team) {
    for (int p = t; p < parts_; p += team) {
      try {
        fn_(ctx_, p, parts_);
      } catch (...) {
        bool expected = false;
        if (failed_.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) failure_ = std::current_exception();
      }
    }
  }

  void work(int index, uint32_t seen) {
    tls_in_region = true;  // a worker's own regions (nested calls) run on itself
    for (;;) {
      if (!spin_while_equal(word_, seen)) {
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        while (word_.load(std::memory_order_seq_cst) == seen) futex_wait(word_, seen);
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
      }
      seen = word_.load(std::memory_order_acquire);
      const int team = static_cast<int>(seen & ((1u << kTeamBits) - 1));
      if (index + 1 >= team) continue;  // not in this region's team
      run_parts(index + 1, team);
      if (pending_.fetch_sub(1, std::memory_order_seq_cst) == 1 && caller_sleeping_.load(std::memory_order_seq_cst))
        futex_wake_all(pending_);
    }
  }

  Flag start_, busy_;
  std::atomic<int> started_{0};
  std::atomic<uint32_t> word_{0};     // region count << 8 | team; the workers' futex word
  std::atomic<uint32_t> pending_{0};  // workers still running the region; the caller's futex word
  std::atomic<int> sleepers_{0};
  std::atomic<bool> caller_sleeping_{false};
  // The region, written by the caller before it bumps word_.
  RegionPartFn fn_ = nullptr;
  void* ctx_ = nullptr;
  int parts_ = 0;
  std::atomic<bool> failed_{false};
  std::exception_ptr failure_;
};

Pool& pool() {
  // Never destroyed: detached workers may still be asleep in it when static destructors run.
  static Pool* p = [] {
    auto* created = new Pool();
    pthread_atfork(nullptr, nullptr, [] { pool().forget_threads(); });
    return created;
  }();
  return *p;
}

}  // namespace

bool in_region() { return tls_in_region; }

int region_threads() {
  if (split_threads() == 1 || !regions_parallel(now_ns())) return 1;
  return governor().full();
}

RegionTimes run_region(int parts, int threads, RegionPartFn fn, void* ctx) {
  RegionTimes times;
  if (threads > Pool::kMaxThreads) threads = Pool::kMaxThreads;
  const int team = parts < threads ? parts : threads;
  if (team > 1 && !tls_in_region) {
    pool().ensure(threads - 1);
    tls_in_region = true;
    try {
      const bool ran = pool().run(parts, team, fn, ctx, times);
      tls_in_region = false;
      if (ran) return times;
    } catch (...) {
      tls_in_region = false;
      throw;
    }
  }
  // On this thread: one thread too few, nested, or the workers held by another thread's region.
  const bool outer = tls_in_region;
  tls_in_region = true;
  const int64_t start = now_ns();
  std::exception_ptr failure;
  for (int p = 0; p < parts; ++p) {
    try {
      fn(ctx, p, parts);
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
  }
  tls_in_region = outer;
  if (failure) std::rethrow_exception(failure);
  times = {1, now_ns() - start, 0};
  return times;
}

}  // namespace mixtrain::backends::cpu
