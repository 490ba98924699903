// The benchmark report: memory a framework does not record (PyTorch on the CPU writes null) reads
// "n/a" in the table and the chart instead of 0; the chart has a log-scale axis per panel, so an
// outlier leaves the other bars readable; a mistyped document is refused naming the field.
#include <sstream>

#include "bench_report.h"
#include "support/testing.h"

namespace {

nlohmann::json doc_with(const std::string& framework, double mlp_ms, double unet_ms, nlohmann::json memory) {
  nlohmann::json doc = {{"framework", framework}, {"device", "cpu"}, {"size", "tiny"}, {"results", nlohmann::json::array()}};
  for (const auto& [model, ms] : {std::pair<std::string, double>{"mlp", mlp_ms}, {"unet", unet_ms}})
    for (const char* p : {"fp32", "fp16", "bf16"})
      doc["results"].push_back({{"model", model}, {"precision", p}, {"parameters", 10}, {"batch_size", 4},
                                {"median_step_ms", ms}, {"samples_per_s", 4000 / ms}, {"speedup_vs_fp32", 1.0},
                                {"peak_allocated_bytes", memory}, {"peak_reserved_bytes", memory},
                                {"final_loss", 0.5}, {"skipped_steps", 0}});
  return doc;
}

size_t count_of(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST(BenchReport, UnrecordedMemoryIsNotApplicable) {
  const nlohmann::json ours = doc_with("mixtrain", 0.5, 25, 3 * 1048576.0);
  const nlohmann::json torch = doc_with("pytorch", 1.5, 350, nullptr);
  mixtrain::cli::check_bench_json(torch, "reference");  // null memory is allowed
  std::ostringstream table;
  mixtrain::cli::print_bench_table(table, ours, &torch);
  // The reference's 6 rows x allocated, reserved; every row's prediction and arena (absent here).
  EXPECT_EQ(count_of(table.str(), "n/a"), 12u + 12u) << table.str();
  EXPECT_EQ(table.str().find("  0.0 "), std::string::npos) << table.str();

  const std::string svg = mixtrain::cli::bench_svg(ours, &torch);
  EXPECT_EQ(count_of(svg, "class=\"na\""), 6u);                  // the reference's memory bars
  EXPECT_EQ(count_of(svg, "class=\"bar\""), 6u * 2 + 6u);       // time: 12 bars; memory: ours only
  EXPECT_EQ(count_of(svg, "class=\"axes\""), 2u);
  EXPECT_NE(svg.find("log scale"), std::string::npos);
  EXPECT_NE(svg.find(">100<"), std::string::npos);  // decade ticks from 0.1 to 1000 ms
  EXPECT_NE(svg.find(">0.1<"), std::string::npos);
  EXPECT_EQ(count_of(svg, "<"), count_of(svg, ">"));
}

TEST(BenchReport, MistypedFieldsAreNamed) {
  auto message = [](const nlohmann::json& doc) -> std::string {
    try {
      mixtrain::cli::check_bench_json(doc, "--reference r.json");
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "";
  };
  nlohmann::json doc = doc_with("x", 1, 2, 1.0);
  EXPECT_EQ(message(doc), "");
  doc["results"][1]["median_step_ms"] = nullptr;  // only memory may be null
  EXPECT_NE(message(doc).find("--reference r.json: missing or mistyped field \"results[1].median_step_ms\""),
            std::string::npos)
      << message(doc);
  EXPECT_NE(message(doc_with("x", 1, 2, "lots")).find("results[0].peak_allocated_bytes"), std::string::npos);
}

// The dry run's predicted peak and planned arena sit beside the measured peaks; null reads n/a,
// and a mistyped value is refused naming the field.
TEST(BenchReport, PredictionColumnsShowTheDryRunOrNotApplicable) {
  nlohmann::json ours = doc_with("mixtrain", 0.5, 25, 3 * 1048576.0);
  for (auto& r : ours["results"]) {
    r["predicted_peak_bytes"] = 2.5 * 1048576.0;
    r["plan_arena_bytes"] = 1.5 * 1048576.0;
  }
  ours["results"][0]["plan_arena_bytes"] = nullptr;
  mixtrain::cli::check_bench_json(ours, "ours");
  std::ostringstream table;
  mixtrain::cli::print_bench_table(table, ours, nullptr);
  EXPECT_NE(table.str().find("pred MiB"), std::string::npos) << table.str();
  EXPECT_NE(table.str().find("arena MiB"), std::string::npos) << table.str();
  EXPECT_EQ(count_of(table.str(), "        2.5"), 6u) << table.str();
  EXPECT_EQ(count_of(table.str(), "        1.5"), 5u) << table.str();
  EXPECT_EQ(count_of(table.str(), "n/a"), 1u) << table.str();
  ours["results"][2]["predicted_peak_bytes"] = "big";
  try {
    mixtrain::cli::check_bench_json(ours, "ours");
    ADD_FAILURE() << "a mistyped prediction was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("results[2].predicted_peak_bytes"), std::string::npos) << e.what();
  }
}
