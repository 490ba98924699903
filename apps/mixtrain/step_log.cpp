#include "step_log.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

namespace mixtrain::cli {

std::string iso8601_utc(std::chrono::system_clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000 - (ms % 1000 < 0));
  std::tm utc{};
  gmtime_r(&secs, &utc);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday,
                utc.tm_hour, utc.tm_min, utc.tm_sec, static_cast<int>(((ms % 1000) + 1000) % 1000));
  return buf;
}

nlohmann::json step_log_line(const train::StepRecord& r, int64_t batch_size, const memory::Stats& memory,
                             std::chrono::system_clock::time_point now) {
  nlohmann::json line = train::step_record_json(r);  // the library's encoding, and what a log adds
  line["samples_per_s"] = static_cast<double>(batch_size) / std::max(r.seconds, 1e-9);
  line["allocated_bytes"] = memory.allocated_bytes;
  line["peak_allocated_bytes"] = memory.peak_allocated_bytes;
  line["peak_reserved_bytes"] = memory.peak_reserved_bytes;
  line["plan_hits"] = memory.num_plan_hits;
  line["plan_misses"] = memory.num_plan_misses;
  line["time"] = iso8601_utc(now);
  return line;
}

}  // namespace mixtrain::cli
