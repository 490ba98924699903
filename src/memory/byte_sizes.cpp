// Byte counts as people write them: format_bytes and parse_bytes (device_memory.h).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "mixtrain/base/error.h"
#include "mixtrain/memory/device_memory.h"

namespace mixtrain::memory {

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (std::fabs(v) >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

int64_t parse_bytes(const std::string& text, const std::string& what) {
  const auto bad = [&](const char* why) {
    MT_ERROR(what, ": expects a size such as 8GiB, 512MiB or 4096 (bytes), got '", text, "'", why);
  };
  size_t digits = 0;
  while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.'))
    ++digits;
  const std::string number = text.substr(0, digits), unit = text.substr(digits);
  if (number.empty() || number.front() == '.' || number.back() == '.' || std::count(number.begin(), number.end(), '.') > 1)
    bad("");
  static const std::vector<std::pair<std::string, double>> kUnits = {
      {"", 1},         {"B", 1},          {"KiB", 0x1p10},   {"MiB", 0x1p20},   {"GiB", 0x1p30},
      {"TiB", 0x1p40}, {"kB", 1e3},       {"KB", 1e3},       {"MB", 1e6},       {"GB", 1e9},
      {"TB", 1e12}};
  const auto unit_it = std::find_if(kUnits.begin(), kUnits.end(), [&](const auto& u) { return u.first == unit; });
  if (unit_it == kUnits.end()) bad(" (units: B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)");
  const double bytes = std::strtod(number.c_str(), nullptr) * unit_it->second;
  if (!(bytes >= 1) || bytes > 0x1p62) bad(" (must be 1 byte to 4 EiB)");
  if (unit_it->second == 1 && number.find('.') != std::string::npos) bad(" (bytes are whole)");
  return static_cast<int64_t>(std::llround(bytes));
}

}  // namespace mixtrain::memory
