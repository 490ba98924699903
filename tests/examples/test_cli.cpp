// The `mixtrain` program, run as users run it: bench output files, train's log and checkpoints,
// and one-line usage errors with exit code 2.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "mixtrain/config.h"

#include "examples/cli_run.h"
#include "support/testing.h"

namespace {

using mixtrain::testing::CliRun;
using mixtrain::testing::run_mixtrain;
using mixtrain::testing::slurp;

size_t count_of(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST(MixtrainCli, BenchWritesJsonAndSvg) {
  const mixtrain::testing::TempDir tmp("mixtrain_bench_test");  // removed when the test ends
  const std::string dir = tmp.path;
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
    // The dry run's prediction of a steady step, and its arena, which holds only in-step buffers.
    ASSERT_TRUE(row["predicted_peak_bytes"].is_number()) << row.dump();
    ASSERT_TRUE(row["plan_arena_bytes"].is_number()) << row.dump();
    EXPECT_GT(row["plan_arena_bytes"].get<int64_t>(), 0);
    EXPECT_LT(row["plan_arena_bytes"].get<int64_t>(), row["predicted_peak_bytes"].get<int64_t>());
  }
  EXPECT_NE(r.out.find("pred MiB"), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find("no memory prediction"), std::string::npos) << r.err;
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

  // PyTorch's CPU autocast lists, as bench/reference's torch.autocast("cpu") uses them: recorded.
  const CliRun torch_lists = run_mixtrain("bench --models mlp --precisions bf16 --size tiny --device cpu --steps 1 "
                                          "--warmup 0 --cpu-autocast pytorch --out " + dir);
  ASSERT_EQ(torch_lists.code, 0) << torch_lists.err;
  EXPECT_EQ(nlohmann::json::parse(slurp(dir + "/bench.json"))["cpu_autocast"], "pytorch");

  const CliRun bad_ref = run_mixtrain("bench --models mlp --steps 1 --out " + dir + " --reference " + dir + "/nope.json");
  EXPECT_NE(bad_ref.code, 0);
  EXPECT_NE(bad_ref.err.find("nope.json"), std::string::npos) << bad_ref.err;
}

// The transformer warms up over a tenth of the run's --steps (not of its preset's), then decays.
TEST(MixtrainCli, TransformerWarmUpFollowsTheRunsSteps) {
  const std::string log = ::testing::TempDir() + "mixtrain_warmup_test_" + std::to_string(::getpid()) + ".jsonl";
  const CliRun r = run_mixtrain("train transformer --synthetic --device cpu --batch-size 4 --steps 20 --log " + log);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  std::istringstream lines(slurp(log));
  std::remove(log.c_str());
  std::vector<double> lr;
  for (std::string line; std::getline(lines, line);) lr.push_back(nlohmann::json::parse(line)["lr"].get<double>());
  ASSERT_EQ(lr.size(), 20u);
  // A warm-up of 2 steps (PyTorch's LinearLR from 1/2 to 1 over 2 steps: 1/2, 3/4), then the
  // cosine from the full rate.
  EXPECT_NEAR(lr[0], 0.5e-3, 1e-9);
  EXPECT_NEAR(lr[1], 0.75e-3, 1e-9);
  EXPECT_NEAR(lr[2], 1e-3, 1e-9);
  for (size_t i = 3; i < lr.size(); ++i) EXPECT_LE(lr[i], lr[i - 1]) << "step " << i + 1;
  EXPECT_LT(lr.back(), 0.1e-3);  // cosine decay to 0 over the other 18
}

TEST(MixtrainCli, TrainLogsStepsAndResumes) {
  const std::string dir = ::testing::TempDir() + "mixtrain_train_test_" + std::to_string(::getpid());
  const std::string log = dir + ".jsonl", ckpt = dir + "_ckpt";
  std::system(("rm -rf " + ckpt).c_str());
  const CliRun first = run_mixtrain("train mlp --synthetic --device cpu --steps 4 --batch-size 32 --log " + log + " --save " + ckpt);
  ASSERT_EQ(first.code, 0) << first.out << first.err;
  EXPECT_NE(first.out.find("final loss"), std::string::npos) << first.out;
  EXPECT_NE(first.out.find("peak memory allocated"), std::string::npos) << first.out;
  std::istringstream lines(slurp(log));
  std::string line;
  int64_t step = 0;
  const std::regex iso_time(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)");
  std::string previous_time;
  while (std::getline(lines, line)) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["step"].get<int64_t>(), ++step);
    for (const char* key : {"loss", "lr", "scale", "seconds", "samples_per_s"})
      EXPECT_TRUE(j.contains(key) && j[key].is_number() && std::isfinite(j[key].get<double>())) << key << ": " << line;
    EXPECT_TRUE(j["skipped"].is_boolean()) << line;
    // JSON has no inf: a skipped step's non-finite gradient norm is null.
    EXPECT_TRUE(j["grad_norm"].is_number() || (j["grad_norm"].is_null() && j["skipped"].get<bool>())) << line;
    EXPECT_EQ(j["lr"].get<double>(), 1e-3) << line;  // the MLP trains at a constant rate
    EXPECT_NEAR(j["samples_per_s"].get<double>(), 32 / j["seconds"].get<double>(), 1e-6 * j["samples_per_s"].get<double>());
    EXPECT_GT(j["peak_allocated_bytes"].get<int64_t>(), 0) << line;
    EXPECT_GE(j["peak_reserved_bytes"].get<int64_t>(), j["peak_allocated_bytes"].get<int64_t>()) << line;
    EXPECT_GE(j["peak_allocated_bytes"].get<int64_t>(), j["allocated_bytes"].get<int64_t>()) << line;
    const std::string time = j["time"].get<std::string>();
    EXPECT_TRUE(std::regex_match(time, iso_time)) << time;
    EXPECT_GE(time, previous_time);  // ISO 8601 sorts as text
    previous_time = time;
  }
  EXPECT_EQ(step, 4);

  // mixtrain plot draws the log.
  const CliRun plot = run_mixtrain("plot " + log + " --out " + dir + ".svg");
  ASSERT_EQ(plot.code, 0) << plot.err;
  EXPECT_NE(plot.out.find("4 steps"), std::string::npos) << plot.out;
  const std::string svg = slurp(dir + ".svg");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_EQ(count_of(svg, "class=\"axes\""), 3u);  // loss, scale, learning rate
  // A log that cannot be read is a file error (mixtrain::Error, exit 1), as a bad line in one is.
  const CliRun bad_plot = run_mixtrain("plot " + dir + "_nope.jsonl");
  EXPECT_EQ(bad_plot.code, 1);
  EXPECT_NE(bad_plot.err.find("_nope.jsonl"), std::string::npos) << bad_plot.err;

  const CliRun resumed = run_mixtrain("train mlp --synthetic --device cpu --steps 6 --batch-size 32 --log " + log + " --resume " + ckpt);
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  std::istringstream again(slurp(log));
  ASSERT_TRUE(std::getline(again, line));
  EXPECT_EQ(nlohmann::json::parse(line)["step"], 5);  // carries on after the checkpoint's step 4
}

// --precision fp8: the transformer trains with its Linear layers in FP8, checkpoints with its FP8
// state, and bench runs it beside bf16 (resuming bit for bit: tests/examples/test_fp8_trainers.cpp).
TEST(MixtrainCli, Fp8TrainsCheckpointsAndBenches) {
  const std::string base = ::testing::TempDir() + "mixtrain_fp8_" + std::to_string(::getpid());
  std::system(("rm -rf " + base + "_ckpt").c_str());
  const CliRun train = run_mixtrain("train transformer --synthetic --device cpu --precision fp8 --batch-size 4 "
                                    "--steps 3 --save " + base + "_ckpt");
  ASSERT_EQ(train.code, 0) << train.out << train.err;
  EXPECT_NE(train.out.find("fp8 on cpu"), std::string::npos) << train.out;
  EXPECT_NE(train.out.find("13 of 13 Linear layers in FP8"), std::string::npos) << train.out;
  const nlohmann::json manifest = nlohmann::json::parse(slurp(base + "_ckpt/trainer.json"));
  EXPECT_EQ(manifest["fp8"]["updates"], 3);
  EXPECT_EQ(manifest["fp8"]["recipe"]["format"], "hybrid");
  // Resuming as another precision: the model has no FP8 buffers, so the checkpoint does not fit it.
  const CliRun other = run_mixtrain("train transformer --synthetic --device cpu --precision bf16 --batch-size 4 "
                                    "--steps 4 --resume " + base + "_ckpt");
  EXPECT_EQ(other.code, 1);
  EXPECT_NE(other.err.find("FP8 scaling state"), std::string::npos) << other.err;

  const CliRun bench = run_mixtrain("bench --device cpu --size tiny --models transformer --precisions bf16,fp8 "
                                    "--steps 2 --warmup 1 --out " + base + "_bench");
  ASSERT_EQ(bench.code, 0) << bench.out << bench.err;
  const nlohmann::json doc = nlohmann::json::parse(slurp(base + "_bench/bench.json"));
  ASSERT_EQ(doc["results"].size(), 2u);
  EXPECT_EQ(doc["results"][1]["precision"], "fp8");
  EXPECT_TRUE(doc["results"][1]["predicted_peak_bytes"].is_number()) << doc.dump();
  EXPECT_NE(slurp(base + "_bench/bench.svg").find(">fp8</text>"), std::string::npos);
  std::system(("rm -rf " + base + "_ckpt " + base + "_bench").c_str());
}

// train --memory-plan: the same JSONL losses, bit for bit, as the unplanned run (the log writes
// doubles in full), with plan hits counted in the log and reported in the summary. One thread:
// some multi-threaded UNet runs differ in the last bits from one run to the next, plan or not.
TEST(MixtrainCli, TrainWithMemoryPlanLogsTheSameLosses) {
  const std::string base = ::testing::TempDir() + "mixtrain_plan_" + std::to_string(::getpid());
  const char* threads = std::getenv("OMP_NUM_THREADS");
  const std::string saved_threads = threads ? threads : "";
  ::setenv("OMP_NUM_THREADS", "1", 1);
  for (const auto& [model, precision] : std::vector<std::pair<std::string, std::string>>{
           {"mlp", "fp16"}, {"unet", "bf16"}, {"transformer", "fp16"}, {"transformer", "fp32"}}) {
    SCOPED_TRACE(model + " " + precision);
    const std::string args =
        "train " + model + " --synthetic --device cpu --steps 4 --batch-size 2 --precision " + precision + " --log ";
    const CliRun plain = run_mixtrain(args + base + "_plain.jsonl");
    ASSERT_EQ(plain.code, 0) << plain.out << plain.err;
    EXPECT_EQ(plain.out.find("memory plan"), std::string::npos) << plain.out;
    const CliRun planned = run_mixtrain(args + base + "_planned.jsonl --memory-plan");
    ASSERT_EQ(planned.code, 0) << planned.out << planned.err;
    const std::regex summary(R"(memory plan: 1 plans, (\d+) arena hits, (\d+) missed steps)");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(planned.out, m, summary)) << planned.out;
    EXPECT_GT(std::stoll(m[1]), 0);
    EXPECT_LE(std::stoll(m[2]), 1);  // at most the first replay (MEMORY.md, "Static plans")
    std::istringstream a(slurp(base + "_plain.jsonl")), b(slurp(base + "_planned.jsonl"));
    std::string la, lb;
    int64_t steps = 0;
    while (std::getline(a, la)) {
      ASSERT_TRUE(std::getline(b, lb));
      const auto ja = nlohmann::json::parse(la), jb = nlohmann::json::parse(lb);
      EXPECT_EQ(ja["loss"].get<double>(), jb["loss"].get<double>()) << la << "\n" << lb;
      EXPECT_EQ(ja["grad_norm"], jb["grad_norm"]) << la << "\n" << lb;
      EXPECT_EQ(ja["plan_hits"].get<int64_t>(), 0) << la;
      if (++steps > 1) EXPECT_GT(jb["plan_hits"].get<int64_t>(), 0) << lb;  // replays from the second step
    }
    EXPECT_EQ(steps, 4);
    EXPECT_FALSE(std::getline(b, lb));
  }
  std::remove((base + "_plain.jsonl").c_str());
  std::remove((base + "_planned.jsonl").c_str());
  if (threads)
    ::setenv("OMP_NUM_THREADS", saved_threads.c_str(), 1);
  else
    ::unsetenv("OMP_NUM_THREADS");
}

TEST(MixtrainCli, UsageErrorsAreOneLineWithExitCode2) {
  for (const std::string args :
       {"train mlp --bogus 1", "train mlp --precision fp4", "train resnet", "bench --size huge", "bench --fp32-math tf16",
        "bench --models mlp,resnet", "train mlp --steps -3", "train mlp --save-every -1", "train mlp --lr 0",
        "train mlp --seed -1", "train", "train mlp unet", "policy --bogus", "policy --cpu-autocast tpu",
        "bench --steps 0", "launch --nproc x -- true", "train mlp --cpu-autocast gpu", "bench --cpu-autocast tpu", "frobnicate"}) {
    SCOPED_TRACE(args);
    const CliRun r = run_mixtrain(args);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_EQ(count_of(r.err, "\n"), 1u) << r.err;
    EXPECT_EQ(r.out, "");
  }
  // The message names the flag (or argument) at fault.
  for (const auto& [args, named] : std::vector<std::pair<std::string, std::string>>{
           {"train mlp --bogus 1", "--bogus"},
           {"train mlp --steps 3x", "--steps"},
           {"train mlp --save-every -1", "--save-every"},
           {"train resnet", "resnet"},
           {"bench --models mlp,resnet", "--models"},
           {"policy --cpu-autocast tpu", "--cpu-autocast"}}) {
    const CliRun r = run_mixtrain(args);
    EXPECT_NE(r.err.find(named), std::string::npos) << args << ": " << r.err;
  }
  // --cpu-autocast pytorch is a CPU preset.
  const CliRun gpu = run_mixtrain("train mlp --device cuda --cpu-autocast pytorch --synthetic");
  EXPECT_NE(gpu.code, 0);
  EXPECT_NE(gpu.err.find("cuda"), std::string::npos) << gpu.err;
  // A missing data file is an error too (not a usage error).
  const CliRun missing = run_mixtrain("train mlp --synthetic --device cpu --steps 1 --resume /nonexistent/ckpt");
  EXPECT_NE(missing.code, 0);
  EXPECT_NE(missing.err.find("/nonexistent/ckpt"), std::string::npos) << missing.err;
}

TEST(MixtrainCli, HelpPrintsTheUsageWithSuccess) {
  for (const std::string args : {"--help", "help", "-h"}) {
    SCOPED_TRACE(args);
    const CliRun r = run_mixtrain(args);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("usage: mixtrain <command>", 0), 0u) << r.out;
    for (const char* command : {"train", "bench", "policy", "launch", "plot", "memory", "--version"})
      EXPECT_NE(r.out.find("  " + std::string(command) + " "), std::string::npos) << command << " in\n" << r.out;
  }
  EXPECT_EQ(run_mixtrain("").code, 2);  // no command: the usage, as an error
}

// Each command's --help lists every flag it takes, each with its default, and fits 80 columns.
TEST(MixtrainCli, EachCommandsHelpListsEveryFlagWithItsDefault) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> commands = {
      {"train", {"--precision", "--device", "--steps", "--batch-size", "--lr", "--seed", "--save", "--save-every",
                 "--resume", "--log", "--cpu-autocast", "--synthetic", "--channels-last",
                 "--checkpoint-activations", "--memory-plan", "--zero", "--checkpoint-sharded"}},
      {"bench", {"--models", "--precisions", "--device", "--steps", "--warmup", "--size", "--out", "--reference",
                 "--fp32-math", "--channels-last", "--cpu-autocast"}},
      {"policy", {"--load", "--json", "--markdown", "--cpu-autocast"}},
      {"launch", {"--nproc,--nproc-per-node", "--nnodes", "--node-rank", "--master-addr", "--master-port", "--run-id",
                  "--rank-weights", "--rank-batches", "--rank-memory", "--max-restarts", "--elastic", "--join"}},
      {"plot", {"--out"}},
      {"memory", {"--batch-size", "--precision", "--device", "--size", "--checkpoint-activations", "--json", "--fit",
                  "--measure", "--timeline", "--world-size", "--zero"}}};
  const std::vector<std::string> switches = {"--synthetic", "--channels-last", "--checkpoint-activations", "--json",
                                             "--markdown", "--measure", "--memory-plan",
                                             "--elastic", "--join", "--checkpoint-sharded"};
  for (const auto& [command, flags] : commands) {
    for (const std::string& form : {command + " --help", command + " -h", "help " + command}) {
      SCOPED_TRACE(form);
      const bool takes_model = command == "train" || command == "memory";
      const CliRun r = run_mixtrain(form + (takes_model && form.rfind("help", 0) != 0 ? " mlp" : ""));
      EXPECT_EQ(r.code, 0) << r.err;
      EXPECT_NE(r.out.find("usage: mixtrain " + command + " [OPTIONS]"), std::string::npos) << r.out;
      std::istringstream lines(r.out);
      for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 80u) << line;
      size_t listed = 0;
      for (size_t at = r.out.find("\n  --"); at != std::string::npos; at = r.out.find("\n  --", at + 1)) ++listed;
      EXPECT_EQ(listed, flags.size()) << r.out;  // no flag undocumented, none forgotten here
      for (const std::string& flag : flags) {
        const size_t at = r.out.find("\n  " + flag + " ") != std::string::npos ? r.out.find("\n  " + flag + " ")
                                                                              : r.out.find("\n  " + flag + "\n");
        ASSERT_NE(at, std::string::npos) << flag << " missing from\n" << r.out;
        const std::string entry = r.out.substr(at, r.out.find("\n  -", at + 1) - at);
        const bool is_switch = std::find(switches.begin(), switches.end(), flag) != switches.end();
        const bool has_default = entry.find("default") != std::string::npos || entry.find("(required)") != std::string::npos;
        EXPECT_EQ(has_default, !is_switch) << entry;
      }
    }
  }
  // policy --load is documented with its format.
  EXPECT_NE(run_mixtrain("policy --help").out.find("as --json prints"), std::string::npos);
}

TEST(MixtrainCli, UnwritableOutputsFailBeforeTraining) {
  const std::string base = ::testing::TempDir() + "mixtrain_unwritable_" + std::to_string(::getpid());
  std::system(("rm -rf " + base + " && mkdir -p " + base + "/foreign && touch " + base + "/file " + base +
               "/foreign/notes.txt").c_str());
  // A million steps: only a check before training returns in time.
  const std::string train = "train mlp --synthetic --device cpu --steps 1000000 ";
  for (const auto& [args, named] : std::vector<std::pair<std::string, std::string>>{
           {train + "--save " + base + "/file/ckpt", base + "/file"},
           {train + "--save " + base + "/foreign", "notes.txt"},
           {train + "--log " + base + "/file/log.jsonl", base + "/file/log.jsonl"},
           {"bench --models mlp --steps 1000000 --out " + base + "/file/out", base + "/file"}}) {
    SCOPED_TRACE(args);
    const CliRun r = run_mixtrain(args);
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.err.find(named), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("step "), std::string::npos) << r.out;  // no training step ran
    EXPECT_EQ(r.out.find("ms/step"), std::string::npos) << r.out;
  }
  // The foreign directory is left as it was, and nothing was created beside the file.
  EXPECT_EQ(slurp(base + "/foreign/notes.txt"), "");
  EXPECT_EQ(std::system(("test -e " + base + "/foreign/model.safetensors").c_str()) == 0, false);
  std::system(("rm -rf " + base).c_str());
}

TEST(MixtrainCli, CpuAutocastPytorchPresetTrainsInBf16WithTorchsCpuLists) {
  const CliRun table = run_mixtrain("policy --cpu-autocast pytorch --json");
  ASSERT_EQ(table.code, 0) << table.err;
  const nlohmann::json j = nlohmann::json::parse(table.out);
  EXPECT_EQ(j["matmul"], "lower_precision");
  EXPECT_EQ(j["conv2d"], "lower_precision");
  EXPECT_EQ(j["mse_loss"], "fp32");
  EXPECT_EQ(j["cross_entropy"], "fp32");
  EXPECT_EQ(j["binary_cross_entropy"], "fp32");  // banned on CUDA only
  EXPECT_EQ(j["cat"], "promote");
  for (const char* op : {"exp", "log", "softmax", "layer_norm", "sum", "upsample_bilinear2d", "dot"})
    EXPECT_EQ(j[op], "passthrough") << op;  // on the CUDA lists, not on torch's CPU lists
  const nlohmann::json cuda = nlohmann::json::parse(run_mixtrain("policy --json").out);
  EXPECT_EQ(cuda["exp"], "fp32");
  EXPECT_EQ(cuda.size(), j.size());

  const CliRun run = run_mixtrain("train mlp --synthetic --device cpu --steps 3 --batch-size 16 --cpu-autocast pytorch");
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_NE(run.out.find("bf16 on cpu"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("CPU autocast preset pytorch"), std::string::npos) << run.out;
  const CliRun fp16 = run_mixtrain("train mlp --synthetic --device cpu --steps 1 --cpu-autocast pytorch --precision fp16");
  ASSERT_EQ(fp16.code, 0) << fp16.err;
  EXPECT_NE(fp16.out.find("fp16 on cpu"), std::string::npos) << fp16.out;
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

// The example programs parse with the same parser: --help lists every flag with its default,
// a bad flag is a one-line usage error (exit 2) naming it.
TEST(ExamplePrograms, HelpAndUsageErrors) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> programs = {
      {MT_EXAMPLE_MLP, {"--synthetic", "--csv", "--target", "--data-dir", "--hidden"}},
      {MT_EXAMPLE_UNET, {"--synthetic", "--data-dir", "--image-size", "--width", "--channels-last",
                         "--checkpoint-activations"}},
      {MT_EXAMPLE_TRANSFORMER,
       {"--synthetic", "--text", "--preset", "--layers", "--width", "--heads", "--context", "--checkpoint-activations"}}};
  for (const auto& program : programs) {
    const std::string& exe = program.first;  // not a structured binding: the lambda below captures it (C++20 for bindings)
    const auto& own = program.second;
    SCOPED_TRACE(exe);
    const std::string base = ::testing::TempDir() + "example_" + std::to_string(::getpid());
    auto run = [&](const std::string& args) {
      CliRun r;
      const int status = std::system(("timeout -s KILL 120 " + exe + " " + args + " >" + base + ".out 2>" + base +
                                      ".err </dev/null").c_str());
      r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      r.out = slurp(base + ".out");
      r.err = slurp(base + ".err");
      return r;
    };
    const CliRun help = run("--help");
    EXPECT_EQ(help.code, 0) << help.err;
    std::vector<std::string> flags = own;
    for (const char* f : {"--precision", "--device", "--steps", "--batch-size", "--lr", "--seed", "--log-every",
                          "--memory-plan"})
      flags.push_back(f);
    for (const auto& f : flags) EXPECT_NE(help.out.find("  " + f + " "), std::string::npos) << f << "\n" << help.out;
    size_t listed = 0;
    for (size_t at = help.out.find("\n  --"); at != std::string::npos; at = help.out.find("\n  --", at + 1)) ++listed;
    EXPECT_EQ(listed, flags.size()) << help.out;
    size_t switches = 0;  // flags without a value, so without a default
    for (const char* sw : {"--synthetic", "--channels-last", "--checkpoint-activations", "--memory-plan"})
      switches += std::count(flags.begin(), flags.end(), std::string(sw));
    EXPECT_GE(count_of(help.out, "(default: "), flags.size() - switches) << help.out;
    for (const auto& [args, named] : std::vector<std::pair<std::string, std::string>>{
             {"--bogus", "--bogus"}, {"--steps 0", "--steps"}, {"--seed -1", "--seed"}, {"--precision fp4", "fp4"}}) {
      const CliRun bad = run(args);
      EXPECT_EQ(bad.code, 2) << args << ": " << bad.err;
      EXPECT_EQ(count_of(bad.err, "\n"), 1u) << bad.err;
      EXPECT_NE(bad.err.find(named), std::string::npos) << bad.err;
    }
  }
}

// The example programs take --memory-plan from the shared run flags and report the plan's hits.
TEST(ExamplePrograms, MemoryPlanReportsPlanHits) {
  const std::vector<std::pair<std::string, std::string>> programs = {
      {MT_EXAMPLE_MLP, "--synthetic --hidden 16"},
      {MT_EXAMPLE_UNET, "--synthetic --width 4 --image-size 16"},
      {MT_EXAMPLE_TRANSFORMER, "--synthetic --preset tiny"}};
  const std::string base = ::testing::TempDir() + "example_plan_" + std::to_string(::getpid());
  for (const auto& [exe, args] : programs) {
    SCOPED_TRACE(exe);
    const int status = std::system(("timeout -s KILL 120 " + exe + " " + args +
                                    " --device cpu --steps 3 --batch-size 2 --log-every 1 --memory-plan >" + base +
                                    ".out 2>" + base + ".err </dev/null").c_str());
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << slurp(base + ".err");
    const std::string out = slurp(base + ".out");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(memory plan: 1 plans, (\d+) arena hits)"))) << out;
    EXPECT_GT(std::stoll(m[1]), 0) << out;
  }
}
