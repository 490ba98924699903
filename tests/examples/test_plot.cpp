// `mixtrain plot`: a training log is read strictly (a bad line is named by file and line) and
// drawn as a well-formed SVG with one panel per quantity the log has, the skipped steps marked.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "plot.h"
#include "svg_chart.h"
#include "support/testing.h"

using mixtrain::cli::read_train_log;
using mixtrain::cli::train_log_svg;

namespace {

std::string write_log(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name + "_" + std::to_string(::getpid()) + ".jsonl";
  std::ofstream(path) << text;
  return path;
}

size_t count_of(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

void expect_read_error(const std::string& text, const std::vector<std::string>& parts) {
  const std::string path = write_log("bad", text);
  try {
    read_train_log(path);
    ADD_FAILURE() << "read: " << text;
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

}  // namespace

TEST(PlotLog, ReadsStepsLossScaleLrAndSkips) {
  const std::string path = write_log(
      "good", R"({"step":1,"loss":2.5,"scale":65536,"lr":0.001,"skipped":false}
{"step":2,"loss":null,"scale":65536,"lr":0.001,"skipped":true}

{"step":3,"loss":2.0,"scale":32768,"lr":0.0005,"skipped":false,"time":"x"}
)");
  const auto log = read_train_log(path);
  EXPECT_EQ(log.step, (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(log.loss[0], 2.5);
  EXPECT_TRUE(std::isnan(log.loss[1]));  // a NaN loss is logged as null
  EXPECT_EQ(log.scale[2], 32768);
  EXPECT_EQ(log.lr[2], 0.0005);
  EXPECT_EQ(log.skipped, (std::vector<double>{2}));
  EXPECT_TRUE(log.has_scale && log.has_lr);
  std::remove(path.c_str());
}

TEST(PlotLog, BadLinesAreNamedByFileAndLine) {
  expect_read_error("{\"step\":1,\"loss\":1}\nnot json\n", {":2", "not JSON"});
  expect_read_error("[1,2]\n", {":1", "not a JSON object"});
  expect_read_error("{\"loss\":1}\n", {":1", "step"});
  expect_read_error("{\"step\":1.5,\"loss\":1}\n", {":1", "step"});
  expect_read_error("{\"step\":1}\n", {":1", "loss"});
  expect_read_error("{\"step\":1,\"loss\":\"low\"}\n", {":1", "loss", "not a number"});
  expect_read_error("\n\n", {"no steps"});
}

TEST(PlotLog, SvgHasAPanelPerQuantityAndMarksSkippedSteps) {
  mixtrain::cli::TrainLog log;
  for (int s = 1; s <= 50; ++s) {
    log.step.push_back(s);
    log.loss.push_back(3.0 / s);
    log.scale.push_back(s < 10 ? 65536 : 32768);
    log.lr.push_back(1e-3 * s / 50);
  }
  log.skipped = {9, 30};
  log.has_scale = log.has_lr = true;
  const std::string svg = train_log_svg(log, "run <a&b>");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(count_of(svg, "<"), count_of(svg, ">"));
  EXPECT_NE(svg.find("run &lt;a&amp;b&gt;"), std::string::npos);  // the title escaped
  for (const char* panel : {"class=\"loss\"", "class=\"loss-mean\"", "class=\"scale\"", "class=\"lr\""})
    EXPECT_EQ(count_of(svg, panel), 1u) << panel;
  EXPECT_EQ(count_of(svg, "class=\"skipped\""), 2u);
  EXPECT_EQ(count_of(svg, "class=\"axes\""), 3u);
  EXPECT_NE(svg.find(">65536<"), std::string::npos);  // scale ticks as whole numbers
  EXPECT_NE(svg.find(">32768<"), std::string::npos);

  // A log without scale or lr (an older one) has the loss panel only.
  log.has_scale = log.has_lr = false;
  const std::string loss_only = train_log_svg(log, "old");
  EXPECT_EQ(count_of(loss_only, "class=\"axes\""), 1u);
  EXPECT_EQ(count_of(loss_only, "class=\"scale\""), 0u);
}

TEST(SvgChart, TicksAreRoundAndCoverTheRange) {
  using mixtrain::cli::svg::ticks;
  const auto unit = ticks(0, 1, 5);
  ASSERT_EQ(unit.size(), 6u);
  for (size_t i = 0; i < unit.size(); ++i) EXPECT_NEAR(unit[i], 0.2 * static_cast<double>(i), 1e-12);
  EXPECT_EQ(mixtrain::cli::svg::label(unit[3]), "0.6");
  const auto t = ticks(1, 150, 6);
  EXPECT_EQ(t.front(), 50);
  EXPECT_EQ(t.back(), 150);
  EXPECT_EQ(ticks(2, 2), (std::vector<double>{2}));
  EXPECT_EQ(mixtrain::cli::svg::label(65536), "65536");
  EXPECT_EQ(mixtrain::cli::svg::label(0.0005), "0.0005");
}
