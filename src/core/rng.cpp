#include "mixtrain/core/rng.h"

#include <cmath>

namespace mixtrain {

uint64_t random_draw(uint64_t seed, uint64_t n) {
  // SplitMix64 evaluated at position n of the stream that starts at `seed`.
  uint64_t z = seed + (n + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t Generator::next_u64() { return random_draw(state_.seed, state_.offset++); }

double Generator::next_uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

double Generator::next_normal() {
  const double u1 = 1.0 - next_uniform();  // (0, 1], so the log is finite
  const double u2 = next_uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

uint64_t Generator::reserve(uint64_t n) {
  const uint64_t first = state_.offset;
  state_.offset += n;
  return first;
}

Generator& default_generator() {
  static Generator gen(0);
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace mixtrain
