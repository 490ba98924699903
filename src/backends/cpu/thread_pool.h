#pragma once
// The CPU backend's worker threads: what runs a parallel region's parts (threads.h's run_parallel)
// instead of an OpenMP team. A libgomp thread that waits for the others spins for GOMP_SPINCOUNT
// (300,000) turns, milliseconds, before it sleeps, and that policy is read once, when the runtime
// loads: two processes on the same cores then spent their time slices spinning for threads that
// were not running, each at 2-4 % of its speed alone (docs/CPU.md, "Threads under load"). These
// workers spin for a few microseconds at most, then sleep on a futex, so a thread that waits gives
// its core to the thread it waits for.
#include <cstdint>

namespace mixtrain::backends::cpu {

// A region's parts: fn(ctx, part, parts) for part in [0, parts).
using RegionPartFn = void (*)(void* ctx, int part, int parts);

struct RegionTimes {
  int team = 1;          // threads that ran the parts (the caller among them)
  int64_t busy_ns = 0;   // the caller's time on its own parts
  int64_t wait_ns = 0;   // then its time waiting for the other threads
};

// Runs every part of a region: the calling thread takes parts 0, team, 2 team, ..., worker w
// parts w + 1, w + 1 + team, ... (the parts' bounds never depend on who runs them, so results do
// not either). team = min(parts, threads), threads counting the caller. When the workers are busy
// with another thread's region, or asked from inside a region, the caller runs every part itself.
// The first exception a part throws is rethrown here once every part has finished.
RegionTimes run_region(int parts, int threads, RegionPartFn fn, void* ctx);

// Whether this thread is running a region's part (nested regions then run on their own thread).
bool in_region();

// The threads a region started now may use: the governor's full count (threads.h), or 1 inside a
// region or while the governor holds regions on one thread. For code that cannot include
// threads.h (gemm_bf16_avx512.cpp, built with AVX-512 flags, takes plain-type headers only).
int region_threads();

}  // namespace mixtrain::backends::cpu
