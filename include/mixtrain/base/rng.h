#pragma once
// A seedable, counter-based random generator: the n-th draw is a pure function of (seed, n), so
// its whole state is two integers that a checkpoint saves and restores exactly, and a CUDA
// kernel can reproduce any draw without a sequential state.
#include <math.h>

#include <cstdint>
#include <mutex>

#include "mixtrain/base/host_device.h"

namespace mixtrain {

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // number of 64-bit draws taken
};

// Thread-safe: threads sharing a generator (the default one, typically) each get their own
// draws: every call takes a distinct range of offsets, so the values drawn by several threads are,
// as a multiset, those of one thread drawing the same count. A mutex (not an atomic offset) guards
// the state because the seed and the offset are read together: a reservation never pairs the old
// seed with the new offset of a concurrent manual_seed/set_state.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) { state_.seed = seed; }
  Generator(const Generator& other) : state_(other.state()) {}
  Generator& operator=(const Generator& other);
  uint64_t next_u64();
  double next_uniform();  // [0, 1)
  double next_normal();   // standard normal (Box-Muller on two draws)
  // Reserves n draws and returns the offset of the first, for kernels that draw by counter.
  uint64_t reserve(uint64_t n) { return reserve_draws(n).offset; }
  // Reserves n draws and returns the seed with the offset of the first, read as one state.
  GeneratorState reserve_draws(uint64_t n);
  GeneratorState state() const;
  void set_state(const GeneratorState& s);
  void manual_seed(uint64_t seed) { set_state({seed, 0}); }

 private:
  mutable std::mutex mutex_;
  GeneratorState state_;
};

#if defined(__CUDACC__)
#define MT_HOST_DEVICE __host__ __device__
#else
#define MT_HOST_DEVICE
#endif

// The n-th 64-bit draw of a generator seeded with `seed` (what Generator::next_u64 returns):
// SplitMix64 evaluated at position n. Inline and host/device, so the CUDA kernels draw exactly
// what the CPU draws.
MT_HOST_DEVICE inline uint64_t random_draw(uint64_t seed, uint64_t n) {
  uint64_t z = seed + (n + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A draw as a double in [0, 1) (Generator::next_uniform).
MT_HOST_DEVICE inline double random_uniform(uint64_t seed, uint64_t n) {
  return static_cast<double>(random_draw(seed, n) >> 11) * 0x1.0p-53;
}

// A standard normal from draws n and n + 1 (Generator::next_normal; Box-Muller, cosine branch).
MT_HOST_DEVICE inline double random_normal(uint64_t seed, uint64_t n) {
  const double u1 = 1.0 - random_uniform(seed, n);  // (0, 1], so the log is finite
  const double u2 = random_uniform(seed, n + 1);
  return ::sqrt(-2.0 * ::log(u1)) * ::cos(6.283185307179586 * u2);
}

// Whether dropout with probability p (threshold = p as a float) keeps the element whose draw is
// n: the draw's uniform, as a float, is at least p. Shared by the elementwise dropout and the
// fused attention kernels, CPU and CUDA, so that all of them drop the same elements.
MT_HOST_DEVICE inline bool dropout_keep(uint64_t seed, uint64_t n, float threshold) {
  return static_cast<float>(random_uniform(seed, n)) >= threshold;
}

Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace mixtrain
