#pragma once
// One line of `mixtrain train --log`: a step's record in the library's encoding
// (train::step_record_json: "step", "loss", "lr", "scale", "skipped", "grad_norm", "seconds",
// and "rank_rows" under data parallelism) with what a log adds:
//   {"samples_per_s", "allocated_bytes", "peak_allocated_bytes", "peak_reserved_bytes",
//    "plan_hits", "plan_misses", "time"}
// "time" is the wall-clock time the step ended, ISO 8601 in UTC with milliseconds
// ("2026-11-25T13:04:05.123Z"); the peaks are since training started. A non-finite loss or
// grad_norm (a step the scaler skipped) is null: JSON has no inf or NaN. plan_hits and plan_misses are the
// process's memory::stats counters (requests served from a static plan's arena; planned steps
// that differed from their plan), nonzero with --memory-plan.
#include <chrono>
#include <cstdint>

#include <nlohmann/json.hpp>
#include <mixtrain/mixtrain.h>

#include <mixtrain/train/train_loop.h>

namespace mixtrain::cli {

nlohmann::json step_log_line(const train::StepRecord& record, int64_t batch_size, const memory::Stats& memory,
                             std::chrono::system_clock::time_point now);

// "2026-11-25T13:04:05.123Z"
std::string iso8601_utc(std::chrono::system_clock::time_point t);

}  // namespace mixtrain::cli
