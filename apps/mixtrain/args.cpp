#include "args.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace mixtrain::cli {

Args::Args(const std::vector<std::string>& argv, const std::set<std::string>& flags,
           const std::set<std::string>& switches) {
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.rfind("--", 0) != 0) {
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (switches.count(name)) {
      if (eq != std::string::npos) throw std::runtime_error("--" + name + " takes no value");
      values_[name] = "1";
    } else if (flags.count(name)) {
      if (eq == std::string::npos) {
        if (i + 1 >= argv.size()) throw std::runtime_error("--" + name + " needs a value");
        value = argv[++i];
      }
      values_[name] = value;
    } else {
      throw std::runtime_error("unknown flag --" + name);
    }
  }
}

std::string Args::str(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

int64_t Args::integer(const std::string& name, int64_t fallback, int64_t min_value) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(it->second, &used);
  } catch (...) {
    used = 0;
  }
  if (used != it->second.size() || it->second.empty() || v < min_value)
    throw std::runtime_error("--" + name + " expects an integer >= " + std::to_string(min_value) + ", got '" +
                             it->second + "'");
  return v;
}

double Args::number(const std::string& name, double fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(it->second, &used);
  } catch (...) {
    used = 0;
  }
  if (used != it->second.size() || it->second.empty() || !std::isfinite(v))
    throw std::runtime_error("--" + name + " expects a number, got '" + it->second + "'");
  return v;
}

std::vector<std::string> Args::list(const std::string& name, const std::vector<std::string>& fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  std::vector<std::string> out;
  std::stringstream ss(it->second);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  if (out.empty()) throw std::runtime_error("--" + name + " expects a comma-separated list");
  return out;
}

}  // namespace mixtrain::cli
