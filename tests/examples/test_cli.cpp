// The `mixtrain` program, run as users run it: bench output files, train's log and checkpoints,
// and one-line usage errors with exit code 2.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "mixtrain/config.h"

#include "support/testing.h"

namespace {

struct CliRun {
  int code = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `mixtrain ARGS`, capturing stdout and stderr.
CliRun run_mixtrain(const std::string& args) {
  // Per process: ctest runs the tests of this file in parallel processes.
  const std::string base = ::testing::TempDir() + "mixtrain_cli_" + std::to_string(::getpid());
  const std::string out = base + ".out", err = base + ".err";
  const std::string cmd = std::string(MIXTRAIN_EXE) + " " + args + " >" + out + " 2>" + err + " </dev/null";
  const int status = std::system(cmd.c_str());
  CliRun r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

size_t count_of(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST(MixtrainCli, BenchWritesJsonAndSvg) {
  const std::string dir = ::testing::TempDir() + "mixtrain_bench_test";
  const CliRun r = run_mixtrain("bench --models mlp,transformer --size tiny --device cpu --steps 3 --warmup 1 --out " + dir);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const nlohmann::json doc = nlohmann::json::parse(slurp(dir + "/bench.json"));
  EXPECT_EQ(doc["framework"], "mixtrain");
  EXPECT_EQ(doc["device"], "cpu");
  EXPECT_EQ(doc["size"], "tiny");
  EXPECT_EQ(doc["steps"], 3);
  EXPECT_EQ(doc["fp32_math"], "default");
  EXPECT_EQ(r.out.find("fp32 baseline"), std::string::npos) << r.out;  // TF32 is a GPU matter
  ASSERT_EQ(doc["results"].size(), 6u);
  const char* precisions[] = {"fp32", "fp16", "bf16"};
  for (size_t i = 0; i < 6; ++i) {
    const auto& row = doc["results"][i];
    EXPECT_EQ(row["model"], i < 3 ? "mlp" : "transformer");
    EXPECT_EQ(row["precision"], precisions[i % 3]);
    for (const char* key : {"parameters", "batch_size", "median_step_ms", "samples_per_s", "speedup_vs_fp32",
                            "peak_allocated_bytes", "peak_reserved_bytes", "final_loss", "skipped_steps"})
      EXPECT_TRUE(row.contains(key) && row[key].is_number()) << key;
    EXPECT_GT(row["median_step_ms"].get<double>(), 0);
    EXPECT_GT(row["peak_allocated_bytes"].get<int64_t>(), 0);
    EXPECT_GE(row["peak_reserved_bytes"].get<int64_t>(), row["peak_allocated_bytes"].get<int64_t>());
    EXPECT_TRUE(std::isfinite(row["final_loss"].get<double>()));
  }
  EXPECT_EQ(doc["results"][0]["speedup_vs_fp32"], 1.0);
  // samples/s is batch / median step time.
  const auto& fp16 = doc["results"][1];
  EXPECT_NEAR(fp16["samples_per_s"].get<double>(),
              fp16["batch_size"].get<double>() / (fp16["median_step_ms"].get<double>() / 1e3), 1e-6 * fp16["samples_per_s"].get<double>());
  EXPECT_NE(r.out.find("speedup"), std::string::npos) << r.out;  // the table

  const std::string svg = slurp(dir + "/bench.svg");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(count_of(svg, "class=\"bar\""), 12u);  // 2 models x 3 precisions x 2 panels
  EXPECT_EQ(count_of(svg, "<"), count_of(svg, ">"));

  // Our own results as the reference: the table and chart gain the reference's columns and bars.
  const std::string ref = dir + "/ref.json";
  std::ofstream(ref) << slurp(dir + "/bench.json");
  const CliRun with_ref = run_mixtrain("bench --models mlp --size tiny --device cpu --steps 2 --warmup 0 --out " + dir +
                                " --reference " + ref);
  ASSERT_EQ(with_ref.code, 0) << with_ref.err;
  EXPECT_EQ(count_of(slurp(dir + "/bench.svg"), "class=\"bar\""), 12u);  // 1 model x 6 series x 2 panels
  EXPECT_NE(with_ref.out.find("|"), std::string::npos);
  // A strict-fp32 run says so, and warns that a default-math reference is not comparable.
  const CliRun strict = run_mixtrain("bench --models mlp --precisions fp32 --size tiny --device cpu --steps 1 "
                                     "--warmup 0 --fp32-math strict --out " + dir + " --reference " + ref);
  ASSERT_EQ(strict.code, 0) << strict.err;
  EXPECT_EQ(nlohmann::json::parse(slurp(dir + "/bench.json"))["fp32_math"], "strict");
  EXPECT_NE(strict.out.find("strict fp32 (no TF32); the reference's is default (not comparable)"), std::string::npos)
      << strict.out;

  const CliRun bad_ref = run_mixtrain("bench --models mlp --steps 1 --out " + dir + " --reference " + dir + "/nope.json");
  EXPECT_NE(bad_ref.code, 0);
  EXPECT_NE(bad_ref.err.find("nope.json"), std::string::npos) << bad_ref.err;
}

TEST(MixtrainCli, TrainLogsStepsAndResumes) {
  const std::string dir = ::testing::TempDir() + "mixtrain_train_test";
  const std::string log = dir + ".jsonl", ckpt = dir + "_ckpt";
  std::system(("rm -rf " + ckpt).c_str());
  const CliRun first = run_mixtrain("train mlp --synthetic --device cpu --steps 4 --batch-size 32 --log " + log + " --save " + ckpt);
  ASSERT_EQ(first.code, 0) << first.out << first.err;
  EXPECT_NE(first.out.find("final loss"), std::string::npos) << first.out;
  EXPECT_NE(first.out.find("peak memory allocated"), std::string::npos) << first.out;
  std::istringstream lines(slurp(log));
  std::string line;
  int64_t step = 0;
  while (std::getline(lines, line)) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["step"].get<int64_t>(), ++step);
    EXPECT_TRUE(j.contains("loss") && j.contains("scale") && j.contains("skipped"));
  }
  EXPECT_EQ(step, 4);

  const CliRun resumed = run_mixtrain("train mlp --synthetic --device cpu --steps 6 --batch-size 32 --log " + log + " --resume " + ckpt);
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  std::istringstream again(slurp(log));
  ASSERT_TRUE(std::getline(again, line));
  EXPECT_EQ(nlohmann::json::parse(line)["step"], 5);  // carries on after the checkpoint's step 4
}

TEST(MixtrainCli, UsageErrorsAreOneLineWithExitCode2) {
  for (const std::string args : {"train mlp --bogus 1", "train mlp --precision fp8", "train resnet",
                                 "bench --size huge", "bench --fp32-math tf16", "bench --models mlp,resnet", "train mlp --steps -3"}) {
    SCOPED_TRACE(args);
    const CliRun r = run_mixtrain(args);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_EQ(count_of(r.err, "\n"), 1u) << r.err;
    EXPECT_EQ(r.out, "");
  }
  EXPECT_NE(run_mixtrain("train mlp --bogus 1").err.find("--bogus"), std::string::npos);
  // A missing data file is an error too (not a usage error).
  const CliRun missing = run_mixtrain("train mlp --synthetic --device cpu --steps 1 --resume /nonexistent/ckpt");
  EXPECT_NE(missing.code, 0);
  EXPECT_NE(missing.err.find("/nonexistent/ckpt"), std::string::npos) << missing.err;
}

TEST(MixtrainCli, HelpPrintsTheUsageWithSuccess) {
  for (const std::string args : {"--help", "help", "bench --help", "train mlp --help", "policy -h"}) {
    SCOPED_TRACE(args);
    const CliRun r = run_mixtrain(args);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("usage: mixtrain"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("--fp32-math"), std::string::npos) << r.out;
  }
  EXPECT_EQ(run_mixtrain("").code, 2);  // no command: the usage, as an error
}

TEST(MixtrainCli, VersionPrintsTheConfiguredVersion) {
  for (const std::string args : {"--version", "version"}) {
    SCOPED_TRACE(args);
    const CliRun r = run_mixtrain(args);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out.rfind(std::string("mixtrain ") + MIXTRAIN_VERSION + " (", 0), 0u) << r.out;
    EXPECT_EQ(count_of(r.out, "\n"), 1u) << r.out;
    EXPECT_EQ(r.err, "");
  }
  // config.h carries the version the top-level CMakeLists.txt declares.
  const std::string cmake = slurp(std::string(MT_SOURCE_DIR) + "/CMakeLists.txt");
  const size_t at = cmake.find("project(mixtrain VERSION ");
  ASSERT_NE(at, std::string::npos);
  const size_t from = at + std::string("project(mixtrain VERSION ").size();
  EXPECT_EQ(cmake.substr(from, cmake.find(' ', from) - from), MIXTRAIN_VERSION);
}
