#pragma once
// Strict command-line reading for the example programs: `--flag value` pairs walked in order,
// numbers parsed whole ("12x" is an error), every error a mixtrain::Error naming the flag.
#include <cstdlib>
#include <exception>
#include <iostream>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#include <mixtrain/mixtrain.h>

#include "common/train_loop.h"

namespace mixtrain::examples {

class FlagReader {
 public:
  FlagReader(std::string program, const char* usage, int argc, char** argv)
      : program_(std::move(program)), usage_(usage), argc_(argc), argv_(argv) {}

  // The next flag, or false at the end. Anything not starting with "--" is an error; --help (-h)
  // prints the usage and exits.
  bool next(std::string& flag) {
    if (++i_ >= argc_) return false;
    flag_ = flag = argv_[i_];
    if (flag == "--help" || flag == "-h") {
      std::cout << usage_;
      std::exit(0);
    }
    MT_CHECK(flag.rfind("--", 0) == 0, program_, ": unexpected argument '", flag, "' (see --help)");
    return true;
  }
  std::string value() {
    MT_CHECK(i_ + 1 < argc_, program_, ": ", flag_, " needs a value");
    return argv_[++i_];
  }
  template <class T>
  T number() {
    return parse<T>(value());
  }
  // A number that must be >= min (e.g. a model size, where 0 or a negative is a mistake).
  template <class T>
  T number(T min) {
    const std::string text = value();
    const T v = parse<T>(text);
    MT_CHECK(v >= min, program_, ": ", flag_, " must be >= ", min, ", got '", text, "'");
    return v;
  }
  // text as a number for the current flag (a list flag parses its items with it).
  template <class T>
  T parse(const std::string& text) const {
    // istream reads "-1" into an unsigned type as 2^64 - 1.
    MT_CHECK(std::is_signed<T>::value || text.find('-') == std::string::npos, program_, ": bad value '", text,
             "' for ", flag_, " (must not be negative)");
    std::istringstream is(text);
    T out{};
    is >> out;
    MT_CHECK(!is.fail() && is.eof(), program_, ": bad value '", text, "' for ", flag_);
    return out;
  }
  [[noreturn]] void unknown() const { MT_ERROR(program_, ": unknown flag ", flag_, " (see --help)"); }

 private:
  std::string program_;
  const char* usage_;
  int argc_;
  char** argv_;
  int i_ = 0;
  std::string flag_;
};

// The flags every example trainer takes (--precision, --device, --steps, --batch-size, --lr,
// --seed, --log-every), read into its config; false for any other flag.
template <class Config>
bool read_run_flag(FlagReader& flags, const std::string& flag, Config& c) {
  if (flag == "--precision") c.precision = parse_precision(flags.value());
  else if (flag == "--device") c.device = parse_device(flags.value());
  else if (flag == "--steps") c.steps = flags.number<int64_t>();
  else if (flag == "--batch-size") c.batch_size = flags.number<int64_t>();
  else if (flag == "--lr") c.lr = flags.number<double>();
  else if (flag == "--seed") c.seed = flags.number<uint64_t>();
  else if (flag == "--log-every") c.log_every = flags.number<int64_t>();
  else return false;
  return true;
}

// An example program's main: runs it, and turns an exception into its message and exit code 1.
template <class Program>
int run_program(Program&& program) {
  try {
    program();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}

}  // namespace mixtrain::examples
