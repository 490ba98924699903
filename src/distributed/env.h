#pragma once
// An environment variable's value, or nullptr when it is unset or empty: the launch contract
// treats the two alike.
#include <cstdlib>

namespace mixtrain::distributed {

inline const char* env_value(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

}  // namespace mixtrain::distributed
