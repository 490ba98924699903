#pragma once
// A seedable, counter-based random generator: the n-th draw is a pure function of (seed, n), so
// its whole state is two integers that a checkpoint saves and restores exactly, and a CUDA
// kernel can reproduce any draw without a sequential state.
#include <cstdint>

namespace mixtrain {

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // number of 64-bit draws taken
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) { state_.seed = seed; }
  uint64_t next_u64();
  double next_uniform();  // [0, 1)
  double next_normal();   // standard normal (Box-Muller on two draws)
  // Reserves n draws and returns the offset of the first, for kernels that draw by counter.
  uint64_t reserve(uint64_t n);
  GeneratorState state() const { return state_; }
  void set_state(const GeneratorState& s) { state_ = s; }
  void manual_seed(uint64_t seed) { state_ = {seed, 0}; }

 private:
  GeneratorState state_;
};

// The n-th 64-bit draw of a generator seeded with `seed` (what Generator::next_u64 returns).
uint64_t random_draw(uint64_t seed, uint64_t n);

Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace mixtrain
