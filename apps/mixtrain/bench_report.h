#pragma once
// The benchmark's results: one JSON document (bench.json, the schema that
// bench/reference/torch_amp_bench.py writes too), printed as a table and drawn as an SVG.
//
//   {"framework": "mixtrain" | "pytorch", "framework_version", "device", "device_name", "size",
//    "steps", "warmup",
//    "results": [{"model", "precision", "parameters", "batch_size", "median_step_ms",
//                 "samples_per_s", "speedup_vs_fp32", "peak_allocated_bytes",
//                 "peak_reserved_bytes", "final_loss", "skipped_steps"}, ...]}
// The peak memory fields are null where a framework records none (PyTorch on the CPU).
// mixtrain's rows add "predicted_peak_bytes" (a dry run's peak of one steady training step on the
// device) and "plan_arena_bytes" (that step's in-step buffers planned into one arena): optional,
// null where not computed; the table shows them as "pred MiB" and "arena MiB" ("n/a" if absent).
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

namespace mixtrain::cli {

// Checks a results document (ours or a reference) and throws std::runtime_error naming `what`
// and the first missing or mistyped field.
void check_bench_json(const nlohmann::json& doc, const std::string& what);

// The row of `doc` for (model, precision), or nullptr.
const nlohmann::json* find_result(const nlohmann::json& doc, const std::string& model, const std::string& precision);

// A fixed-width table; with a reference, its step time, speedup and peak memory sit beside ours.
void print_bench_table(std::ostream& out, const nlohmann::json& doc, const nlohmann::json* reference);

// Two panels, median step time and peak allocated memory, fp32 / fp16 / bf16 bars per model (and
// the reference's beside them, hatched), on one log-scale axis per panel with ticks: the models
// differ by orders of magnitude, and one outlier does not flatten the rest. The values are
// written on the bars; a value the document does not record (null) is drawn as "n/a".
std::string bench_svg(const nlohmann::json& doc, const nlohmann::json* reference);

}  // namespace mixtrain::cli
