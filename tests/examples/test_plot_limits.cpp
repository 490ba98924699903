// `mixtrain plot` on hostile logs: a FIFO, /dev/zero or a directory is refused at once; steps or
// losses a few ulps apart at 2^60 or 1e20 draw (the tick loop once never advanced), values near
// the largest double give finite coordinates (never NaN), and a scale <= 0 is refused.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>

#include "examples/cli_run.h"
#include "plot.h"
#include "svg_chart.h"
#include "support/testing.h"

using mixtrain::cli::read_train_log;
using mixtrain::cli::train_log_svg;
using mixtrain::testing::expect_error;

namespace {

std::string write_log(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "plot_limits_" + name + "_" + std::to_string(::getpid()) + ".jsonl";
  std::ofstream(path) << text;
  return path;
}

// Every number in the SVG's coordinates and points is finite.
void expect_finite_svg(const std::string& svg) {
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
  const std::regex coordinate(R"re(\s(x1|x2|y1|y2|x|y)="([^"]*)")re");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), coordinate); it != std::sregex_iterator(); ++it) {
    const std::string v = (*it)[2];
    char* end = nullptr;
    const double d = std::strtod(v.c_str(), &end);
    EXPECT_TRUE(end == v.c_str() + v.size() && std::isfinite(d)) << (*it)[0];
  }
  const size_t tags = std::count(svg.begin(), svg.end(), '<');
  EXPECT_LT(tags, 400u) << "a runaway axis";
}

std::string svg_of(const std::string& name, const std::string& text) {
  const std::string path = write_log(name, text);
  const std::string svg = train_log_svg(read_train_log(path), "t");
  std::remove(path.c_str());
  return svg;
}

}  // namespace

TEST(PlotLimits, RangesAFewUlpsWideDraw) {
  expect_finite_svg(svg_of("steps", "{\"step\":1152921504606846976,\"loss\":1}\n{\"step\":1152921504606847232,\"loss\":2}\n"));
  expect_finite_svg(svg_of("losses", "{\"step\":1,\"loss\":1e20}\n{\"step\":2,\"loss\":1.0000000000000002e20}\n"));
  expect_finite_svg(svg_of("one", "{\"step\":9223372036854775807,\"loss\":5e-324,\"lr\":5e-324,\"scale\":5e-324}\n"));
  using mixtrain::cli::svg::ticks;
  EXPECT_EQ(ticks(0x1p60, 0x1p60 + 256), (std::vector<double>{0x1p60, 0x1p60 + 256}));
  EXPECT_TRUE(ticks(0, INFINITY).empty());
}

TEST(PlotLimits, ValuesNearTheLargestDoubleGiveFiniteCoordinates) {
  expect_finite_svg(svg_of("wide", "{\"step\":1,\"loss\":1e308,\"lr\":1e308,\"scale\":1e308}\n"
                                   "{\"step\":2,\"loss\":-1e308,\"lr\":-1e308,\"scale\":1}\n"
                                   "{\"step\":3,\"loss\":1.7976931348623157e308,\"lr\":-1.7976931348623157e308}\n"));
}

TEST(PlotLimits, ScalesThatAreNotPositiveAreRefused) {
  for (const char* scale : {"0", "-1", "-1e308"}) {
    const std::string path = write_log("scale", std::string("{\"step\":1,\"loss\":1,\"scale\":") + scale + "}\n");
    expect_error([&] { read_train_log(path); }, {path + ":1", "\"scale\"", "> 0"});
    std::remove(path.c_str());
  }
}

TEST(PlotLimits, FifosDevicesAndDirectoriesAreRefusedAtOnce) {
  const std::string fifo = ::testing::TempDir() + "plot_limits_fifo_" + std::to_string(::getpid());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& p : {fifo, std::string("/dev/zero")})
    expect_error([&] { read_train_log(p); }, {p, "not a regular file"});
  expect_error([&] { read_train_log(::testing::TempDir()); }, "is a directory");
  // The command: exit 1 with the message, no SVG written.
  const auto r = mixtrain::testing::run_mixtrain("plot " + fifo + " --out " + fifo + ".svg");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << r.err;
  struct stat st {};
  EXPECT_NE(::stat((fifo + ".svg").c_str(), &st), 0);
  std::remove(fifo.c_str());
}
