#include "mixtrain/core/rng.h"

namespace mixtrain {

uint64_t Generator::next_u64() { return random_draw(state_.seed, state_.offset++); }

double Generator::next_uniform() { return random_uniform(state_.seed, state_.offset++); }

double Generator::next_normal() {
  const double v = random_normal(state_.seed, state_.offset);
  state_.offset += 2;
  return v;
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
