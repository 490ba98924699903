#include "mixtrain/base/rng.h"

namespace mixtrain {

Generator& Generator::operator=(const Generator& other) {
  if (this != &other) set_state(other.state());
  return *this;
}

GeneratorState Generator::reserve_draws(uint64_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  const GeneratorState first = state_;
  state_.offset += n;
  return first;
}

uint64_t Generator::next_u64() {
  const GeneratorState s = reserve_draws(1);
  return random_draw(s.seed, s.offset);
}

double Generator::next_uniform() {
  const GeneratorState s = reserve_draws(1);
  return random_uniform(s.seed, s.offset);
}

double Generator::next_normal() {
  const GeneratorState s = reserve_draws(2);
  return random_normal(s.seed, s.offset);
}

GeneratorState Generator::state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_;
}

void Generator::set_state(const GeneratorState& s) {
  std::lock_guard<std::mutex> lock(mutex_);
  state_ = s;
}

Generator& default_generator() {
  static Generator gen(0);
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace mixtrain
