// `mixtrain train`'s progress line and log lines: the status line fits the terminal's width
// (60 and 200 columns), labels its losses, shows a rate over recent steps (never "3816793.9
// steps/s" at step 1), and degrades to plain lines off a terminal; the JSONL line carries the
// learning rate, wall-clock time, throughput and memory.
#include <chrono>
#include <cstdlib>
#include <limits>
#include <regex>
#include <sstream>
#include <thread>

#include "progress.h"
#include "step_log.h"
#include "support/testing.h"

namespace tr = mixtrain::train;
using mixtrain::cli::Progress;

namespace {

tr::StepRecord record(int64_t step, double loss, double seconds = 0.01) {
  tr::StepRecord r;
  r.step = step;
  r.loss = loss;
  r.scale = 65536;
  r.seconds = seconds;
  r.lr = 1e-3;
  return r;
}

// The pieces a terminal shows: the text between carriage returns, trailing padding removed.
std::vector<std::string> redraws(const std::string& out) {
  std::vector<std::string> lines;
  std::stringstream ss(out);
  for (std::string part; std::getline(ss, part, '\r');) {
    if (part.empty()) continue;
    while (!part.empty() && (part.back() == ' ' || part.back() == '\n')) part.pop_back();
    lines.push_back(part);
  }
  return lines;
}

}  // namespace

TEST(Progress, TerminalLineFitsTheWidth) {
  for (int columns : {60, 200, 20}) {
    SCOPED_TRACE(columns);
    std::ostringstream out;
    Progress p(out, /*terminal=*/true, columns, 1, 1000);
    for (int64_t s = 1; s <= 30; ++s) p.update(record(s, 2.0 - 0.01 * static_cast<double>(s)));
    p.update(record(1000, 0.5));  // the last step is always drawn
    p.finish();
    // Every redraw, padding included, stays left of the last column.
    std::stringstream ss(out.str());
    for (std::string part; std::getline(ss, part, '\r');)
      EXPECT_LE(part.size(), static_cast<size_t>(columns)) << "'" << part << "'";  // columns - 1 plus '\n'
    const std::vector<std::string> lines = redraws(out.str());
    ASSERT_GE(lines.size(), 2u);
    for (const auto& l : lines) {
      EXPECT_LE(l.size(), static_cast<size_t>(columns - 1)) << l;
      EXPECT_EQ(l.find('\n'), std::string::npos);
    }
    const std::string& last = lines.back();
    EXPECT_NE(last.find("step 1000/1000"), std::string::npos) << last;
    if (columns >= 60) EXPECT_NE(last.find("loss 0.5000"), std::string::npos) << last;
    if (columns == 200) {  // wide: every field and a bar
      for (const char* field : {"mean ", "(last 20)", "scale 65536", "steps/s", "ETA 0:00", "["})
        EXPECT_NE(last.find(field), std::string::npos) << field << " in " << last;
    }
    if (columns == 60) EXPECT_EQ(last.find("scale"), std::string::npos) << last;  // dropped first
  }
}

TEST(Progress, StatusLineDropsFieldsNarrowestLast) {
  std::ostringstream out;
  Progress p(out, true, 80, 1, 10);
  p.update(record(1, 1.25));
  for (int columns = 10; columns <= 200; columns += 5) {
    const std::string line = p.status_line(columns);
    EXPECT_LE(line.size(), static_cast<size_t>(columns - 1)) << line;
  }
  EXPECT_NE(p.status_line(200).find("loss 1.2500  mean 1.2500 (last 1)"), std::string::npos) << p.status_line(200);
}

TEST(Progress, RateIsOverRecentStepsAndSaneAtTheFirstStep) {
  std::ostringstream out;
  Progress p(out, false, 80, 1, 100);
  p.update(record(1, 1.0, /*seconds=*/0.5));  // one step of 0.5 s: 2 steps/s, not "millions"
  EXPECT_NE(p.status_line(200, false).find("2.00 steps/s"), std::string::npos) << p.status_line(200, false);
  EXPECT_NE(p.status_line(200, false).find("ETA 0:50"), std::string::npos) << p.status_line(200, false);
  // Slow steps, then fast ones: the window forgets the slow ones.
  for (int64_t s = 2; s <= 3; ++s) {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    p.update(record(s, 1.0));
  }
  for (int64_t s = 4; s <= 4 + static_cast<int64_t>(Progress::kWindow); ++s) p.update(record(s, 1.0));
  const std::string fast = p.status_line(200, false);
  const double rate = std::stod(fast.substr(fast.rfind("  ", fast.find(" steps/s") - 1) + 2));
  EXPECT_GT(rate, 100.0) << fast;  // a whole-run average would be near 3 / 0.3 s = 10
}

TEST(Progress, PlainLinesOffATerminal) {
  std::ostringstream out;
  Progress p(out, /*terminal=*/false, 80, 1, 100);
  for (int64_t s = 1; s <= 100; ++s) p.update(record(s, 1.0));
  p.finish();
  const std::string text = out.str();
  EXPECT_EQ(text.find('\r'), std::string::npos);
  size_t lines = 0;
  for (char c : text) lines += c == '\n';
  EXPECT_EQ(lines, 21u);  // step 1, then every 5th
  EXPECT_EQ(text.find('['), std::string::npos);  // no bar in a log
  EXPECT_EQ(text.rfind("step 100/100  loss 1.0000", std::string::npos), text.rfind("step 100/100")) << text;
}

TEST(Progress, ColumnsComeFromTheEnvironmentThenTheTerminal) {
  const char* saved = std::getenv("COLUMNS");
  const std::string keep = saved ? saved : "";
  ::setenv("COLUMNS", "133", 1);
  EXPECT_EQ(mixtrain::cli::terminal_columns(-1), 133);
  ::setenv("COLUMNS", "wide", 1);  // not a number: ignored; fd -1 is no terminal: 80
  EXPECT_EQ(mixtrain::cli::terminal_columns(-1), 80);
  ::unsetenv("COLUMNS");
  EXPECT_EQ(mixtrain::cli::terminal_columns(-1), 80);
  if (saved) ::setenv("COLUMNS", keep.c_str(), 1);
}

TEST(StepLog, CarriesLrTimeThroughputAndMemory) {
  tr::StepRecord r = record(7, 0.25, 0.125);
  r.lr = 3e-4;
  r.skipped = true;
  r.grad_norm = 1.5;
  mixtrain::memory::Stats st;
  st.allocated_bytes = 100;
  st.peak_allocated_bytes = 300;
  st.peak_reserved_bytes = 512;
  // 2026-11-25 13:04:05.123 UTC
  const auto t = std::chrono::system_clock::time_point(std::chrono::milliseconds(1795611845123LL));
  const nlohmann::json j = nlohmann::json::parse(mixtrain::cli::step_log_line(r, 32, st, t).dump());
  EXPECT_EQ(j["step"], 7);
  EXPECT_EQ(j["loss"], 0.25);
  EXPECT_EQ(j["lr"], 3e-4);
  EXPECT_EQ(j["scale"], 65536.0);
  EXPECT_EQ(j["skipped"], true);
  EXPECT_EQ(j["grad_norm"], 1.5);
  EXPECT_EQ(j["seconds"], 0.125);
  EXPECT_EQ(j["samples_per_s"], 256.0);
  EXPECT_EQ(j["allocated_bytes"], 100);
  EXPECT_EQ(j["peak_allocated_bytes"], 300);
  EXPECT_EQ(j["peak_reserved_bytes"], 512);
  EXPECT_EQ(j["time"], "2026-11-25T13:04:05.123Z");
  EXPECT_EQ(mixtrain::cli::iso8601_utc(std::chrono::system_clock::time_point{}), "1970-01-01T00:00:00.000Z");
  r.grad_norm = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(mixtrain::cli::step_log_line(r, 32, st, t)["grad_norm"].is_null());
}
