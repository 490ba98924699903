#pragma once
// mixtrain::Error and the checking macros every layer uses.
#include <sstream>
#include <stdexcept>
#include <string>

namespace mixtrain {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
inline void append(std::ostringstream&) {}
template <class T, class... Rest>
void append(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  append(os, rest...);
}
template <class... Args>
[[noreturn]] void throw_error(const Args&... args) {
  std::ostringstream os;
  append(os, args...);
  throw Error(os.str());
}
}  // namespace detail

}  // namespace mixtrain

// MT_CHECK(cond, "op: ", "message parts", ...) throws mixtrain::Error built from the parts.
#define MT_CHECK(cond, ...)                                   \
  do {                                                        \
    if (!(cond)) ::mixtrain::detail::throw_error(__VA_ARGS__); \
  } while (0)

#define MT_ERROR(...) ::mixtrain::detail::throw_error(__VA_ARGS__)
