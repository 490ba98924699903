#pragma once
// Strict command-line reading for the example programs: `--flag value` pairs walked in order,
// numbers parsed whole ("12x" is an error), every error a mixtrain::Error naming the flag.
#include <sstream>
#include <string>
#include <utility>

#include <mixtrain/mixtrain.h>

namespace mixtrain::examples {

class FlagReader {
 public:
  FlagReader(std::string program, int argc, char** argv) : program_(std::move(program)), argc_(argc), argv_(argv) {}

  // The next flag, or false at the end. Anything not starting with "--" is an error.
  bool next(std::string& flag) {
    if (++i_ >= argc_) return false;
    flag_ = flag = argv_[i_];
    MT_CHECK(flag.rfind("--", 0) == 0 || flag == "-h", program_, ": unexpected argument '", flag, "' (see --help)");
    return true;
  }
  std::string value() {
    MT_CHECK(i_ + 1 < argc_, program_, ": ", flag_, " needs a value");
    return argv_[++i_];
  }
  template <class T>
  T number() {
    const std::string v = value();
    std::istringstream is(v);
    T out{};
    is >> out;
    MT_CHECK(!is.fail() && is.eof(), program_, ": bad value '", v, "' for ", flag_);
    return out;
  }
  [[noreturn]] void unknown() const { MT_ERROR(program_, ": unknown flag ", flag_, " (see --help)"); }

 private:
  std::string program_;
  int argc_;
  char** argv_;
  int i_ = 0;
  std::string flag_;
};

}  // namespace mixtrain::examples
