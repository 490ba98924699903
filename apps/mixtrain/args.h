#pragma once
// Command-line flags for the mixtrain tool: --name value pairs and --switches, parsed strictly
// (an unknown flag or a bad value is a one-line error).
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace mixtrain::cli {

class Args {
 public:
  // flags: names taking a value; switches: names without one. Throws std::runtime_error.
  Args(const std::vector<std::string>& argv, const std::set<std::string>& flags, const std::set<std::string>& switches);

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string str(const std::string& name, const std::string& fallback) const;
  int64_t integer(const std::string& name, int64_t fallback, int64_t min_value) const;
  double number(const std::string& name, double fallback) const;
  std::vector<std::string> list(const std::string& name, const std::vector<std::string>& fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

}  // namespace mixtrain::cli
