// `mixtrain launch` when ranks fail: --max-restarts restarts every rank from the last checkpoint
// and ends with the weights of a run that never failed, bit for bit; --elastic lets the ranks left
// go on (and a --join'ed replacement come in, following the job's adaptive shares) on one process's
// loss curve, with ZeRO-1 too (back to the last checkpoint); `mixtrain memory --zero 1` predicts the
// optimizer state a ZeRO rank holds.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "memory_predict.h"
#include "support/testing.h"

namespace {

namespace fs = std::filesystem;

struct LaunchResult {
  int code = -1;
  std::string out;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A directory of this test's own, removed with it.
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& name) : path(::testing::TempDir() + name + "_" + std::to_string(::getpid())) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& f) const { return path + "/" + f; }
};

LaunchResult run(const std::string& args, const std::string& env, const std::string& out_file) {
  const std::string cmd = "timeout -s KILL 60 env " + env + " " + std::string(MIXTRAIN_EXE) + " " + args + " >" +
                          out_file + " 2>&1 </dev/null";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out_file)};
}

// The log's records by step; a step logged twice (computed again after a rollback) keeps the last.
std::map<int64_t, nlohmann::json> steps_of(const std::string& log) {
  std::map<int64_t, nlohmann::json> out;
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    out[j.at("step").get<int64_t>()] = j;
  }
  return out;
}

void expect_same_curve(const std::map<int64_t, nlohmann::json>& got, const std::map<int64_t, nlohmann::json>& want,
                       size_t steps) {
  ASSERT_EQ(want.size(), steps);
  ASSERT_EQ(got.size(), steps);
  for (const auto& [step, w] : want) {
    const double a = got.at(step).at("loss").get<double>(), b = w.at("loss").get<double>();
    EXPECT_NEAR(a, b, 1e-5 * std::max(1.0, std::abs(b))) << "step " << step;
  }
}

// `mixtrain` arguments of the MLP's run, and the command a launcher starts with them.
const std::string kTrainArgs = "train mlp --synthetic --device cpu --precision fp32 ";
const std::string kTrain = std::string(MIXTRAIN_EXE) + " " + kTrainArgs;

}  // namespace

// Rank 1 is killed at step 5 and, after the first restart, at step 10; checkpoints every 4 steps.
// The launcher restarts both ranks twice; they resume from steps 4 and 8 and end with the weights
// and optimizer state of the run that nobody killed, bit for bit. One restart is not enough.
TEST(MixtrainLaunchFailures, MaxRestartsResumeFromTheLastCheckpointBitExactly) {
  TempDir dir("mt_restarts");
  const std::string common = "--steps 12 --batch-size 32 --save-every 4 --save ";
  const LaunchResult clean = run("launch --nproc 2 -- " + kTrain + common + (dir / "clean"), "", dir / "clean.out");
  ASSERT_EQ(clean.code, 0) << clean.out;
  const LaunchResult restarted = run("launch --nproc 2 --max-restarts 2 -- " + kTrain + common + (dir / "restarted"),
                            "MIXTRAIN_TEST_KILL=1:5:0,1:10:1", dir / "restarted.out");
  ASSERT_EQ(restarted.code, 0) << restarted.out;
  EXPECT_NE(restarted.out.find("rank 1 exited with code 137; restarting all 2 ranks of this host from their last "
                               "checkpoint (restart 1 of 2)"),
            std::string::npos)
      << restarted.out;
  EXPECT_NE(restarted.out.find("(restart 2 of 2)"), std::string::npos) << restarted.out;
  EXPECT_NE(restarted.out.find("resumed from " + (dir / "restarted") + " at step 8 (restart 2)"), std::string::npos)
      << restarted.out;
  for (const char* file : {"model.safetensors", "optimizer.safetensors"})
    EXPECT_EQ(slurp(dir / ("clean/" + std::string(file))), slurp(dir / ("restarted/" + std::string(file)))) << file;
  const LaunchResult gave_up = run("launch --nproc 2 --max-restarts 1 -- " + kTrain + common + (dir / "gave_up"),
                          "MIXTRAIN_TEST_KILL=1:5:0,1:10:1", dir / "gave_up.out");
  EXPECT_EQ(gave_up.code, 137) << gave_up.out;
  EXPECT_NE(gave_up.out.find("stopping the others (all 1 restarts used)"), std::string::npos) << gave_up.out;
}

// Three ranks; rank 2 is killed at step 5 of 20, a replacement started with --join is admitted
// after step 11. The loss of every step is one process's; the logged shares show 3, then 2, then
// 3 ranks; the launcher's job ends well, and rank 0 logged each change with the time it cost.
TEST(MixtrainLaunchFailures, ElasticSurvivorsAndAJoinerFollowOneProcessCurve) {
  TempDir dir("mt_elastic");
  const std::string common = "--steps 20 --batch-size 48 --log ";
  ASSERT_EQ(run(kTrainArgs + common + (dir / "one.jsonl"), "", dir / "one.out").code, 0);
  const int port = 20000 + ::getpid() % 20000;
  const std::string token = "MIXTRAIN_STORE_TOKEN=t" + std::to_string(port) + " ";
  const std::string env = token + "MIXTRAIN_TIMEOUT_S=3 MIXTRAIN_TEST_KILL=2:5 MIXTRAIN_TEST_JOIN_AT=10";
  std::thread job([&] {
    const LaunchResult r = run("launch --nproc 3 --elastic --master-port " + std::to_string(port) + " -- " + kTrain + common +
                          (dir / "elastic.jsonl"),
                      env, dir / "elastic.out");
    std::ofstream(dir / "elastic.code") << r.code;
  });
  const LaunchResult joiner = run("launch --join --master-port " + std::to_string(port) + " --nproc 1 -- " + kTrain + common +
                             (dir / "joiner.jsonl"),
                         token + "MIXTRAIN_TIMEOUT_S=15", dir / "joiner.out");
  job.join();
  const std::string out = slurp(dir / "elastic.out");
  EXPECT_EQ(slurp(dir / "elastic.code"), "0") << out;
  EXPECT_EQ(joiner.code, 0) << joiner.out;
  const auto got = steps_of(dir / "elastic.jsonl"), want = steps_of(dir / "one.jsonl");
  expect_same_curve(got, want, 20);
  for (const auto& [step, j] : got) {
    const size_t ranks = j.at("rank_rows").size();
    EXPECT_EQ(ranks, step <= 4 ? 3u : step <= 11 ? 2u : 3u) << "step " << step << ": " << j.dump();
  }
  EXPECT_NE(out.find("rank 2 exited with code 137; the others go on without it (--elastic)"), std::string::npos) << out;
  const std::regex lost("generation 1 at step 4: lost rank 2 \\(launch rank 2\\).*3 -> 2 ranks; ([0-9.]+) s lost; "
                        "the step is redone");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, lost)) << out;
  // A kill is seen at once; the rest is the agreement's window and the new group: within the
  // timeout (3 s) and a step.
  EXPECT_LT(std::stod(m[1]), 3.0) << out;
  EXPECT_NE(out.find("generation 2 at step 11: 1 joined"), std::string::npos) << out;
  EXPECT_NE(out.find("2 -> 3 ranks"), std::string::npos) << out;
}

// A job launched with --rank-weights adaptive admits a --join'ed rank (whose launcher gives it
// only its weight): the joiner follows the job's adaptive shares, which add DDP's timing
// collective to every step, so the three ranks go on together. The joiner runs at nice 10 on the
// job's core, so its rows move to the others, and every step is still one process's.
TEST(MixtrainLaunchFailures, AJoinerFollowsTheJobsAdaptiveShares) {
  if (std::system("command -v taskset >/dev/null && command -v nice >/dev/null") != 0)
    GTEST_SKIP() << "needs taskset and nice to make the joiner slower than the job's ranks";
  TempDir dir("mt_elastic_adaptive");
  const std::string common = "--steps 24 --batch-size 256 --log ";
  ASSERT_EQ(run(kTrainArgs + common + (dir / "one.jsonl"), "", dir / "one.out").code, 0);
  const int port = 20000 + (::getpid() + 7) % 20000;
  const std::string token = "MIXTRAIN_STORE_TOKEN=t" + std::to_string(port) + " ";
  const std::string on_core0 = "taskset -c 0 ";
  std::thread job([&] {
    const LaunchResult r = run("launch --nproc 2 --elastic --rank-weights adaptive --master-port " +
                                   std::to_string(port) + " -- " + on_core0 + kTrain + common + (dir / "elastic.jsonl"),
                               token + "OMP_NUM_THREADS=1 MIXTRAIN_TIMEOUT_S=15 MIXTRAIN_TEST_JOIN_AT=3",
                               dir / "elastic.out");
    std::ofstream(dir / "elastic.code") << r.code;
  });
  const LaunchResult joiner = run("launch --join --master-port " + std::to_string(port) + " --nproc 1 -- " + on_core0 +
                                      "nice -n 10 " + kTrain + common + (dir / "joiner.jsonl"),
                                  token + "OMP_NUM_THREADS=1 MIXTRAIN_TIMEOUT_S=15", dir / "joiner.out");
  job.join();
  const std::string out = slurp(dir / "elastic.out");
  EXPECT_EQ(slurp(dir / "elastic.code"), "0") << out;
  EXPECT_EQ(joiner.code, 0) << joiner.out;
  EXPECT_NE(out.find("generation 1 at step 4: 1 joined"), std::string::npos) << out;
  EXPECT_EQ(out.find("generation 2"), std::string::npos) << "no change after the join: " << out;
  const auto got = steps_of(dir / "elastic.jsonl");
  expect_same_curve(got, steps_of(dir / "one.jsonl"), 24);
  int64_t most_moved = 0;
  for (const auto& [step, j] : got) {
    const auto rows = j.at("rank_rows").get<std::vector<int64_t>>();
    ASSERT_EQ(rows.size(), step <= 4 ? 2u : 3u) << "step " << step << ": " << j.dump();
    if (rows.size() == 3) most_moved = std::max(most_moved, std::min(rows[0], rows[1]) - rows[2]);
  }
  EXPECT_GE(most_moved, 20) << "the joiner at nice 10 never gave rows to the job's ranks: " << out;
}

// ZeRO-1 under --elastic: rank 2 killed at step 7 takes its shard with it, so the two left go back
// to the checkpoint of step 4, resharded, and compute steps 5 and 6 again: the curve is still one
// process's, and the run ends with two ranks' shards. Gathered checkpoints, and sharded ones (three
// shard files read by two ranks).
TEST(MixtrainLaunchFailures, ElasticZeroGoesBackToItsLastCheckpoint) {
  TempDir dir("mt_elastic_zero");
  const std::string common = "--steps 12 --batch-size 48 --log ";
  ASSERT_EQ(run(kTrainArgs + common + (dir / "one.jsonl"), "", dir / "one.out").code, 0);
  for (const std::string layout : {"", "--checkpoint-sharded "}) {
    SCOPED_TRACE(layout);
    fs::remove_all(dir / "ckpt");
    fs::remove(dir / "zero.jsonl");
    const LaunchResult r = run("launch --nproc 3 --elastic -- " + kTrain + "--zero 1 " + layout +
                                   "--save-every 4 --save " + (dir / "ckpt") + " " + common + (dir / "zero.jsonl"),
                               "MIXTRAIN_TIMEOUT_S=3 MIXTRAIN_TEST_KILL=2:7", dir / "zero.out");
    ASSERT_EQ(r.code, 0) << r.out;
    const auto got = steps_of(dir / "zero.jsonl");
    expect_same_curve(got, steps_of(dir / "one.jsonl"), 12);
    for (int64_t step = 5; step <= 12; ++step) EXPECT_EQ(got.at(step).at("rank_rows").size(), 2u) << "step " << step;
    std::ifstream in(dir / "zero.jsonl");
    int lines = 0;
    for (std::string line; std::getline(in, line);) ++lines;
    EXPECT_EQ(lines, 14) << "steps 5 and 6 are computed again after going back to step 4";
    // The last checkpoint (step 12, two ranks) holds two shards when sharded, one file gathered.
    EXPECT_EQ(fs::exists(dir / "ckpt/optimizer-rank-00001-of-00002.safetensors"), !layout.empty());
    EXPECT_EQ(fs::exists(dir / "ckpt/optimizer.safetensors"), layout.empty());
  }
}

// Rank 2 of 3 is killed before DDP's construction (MIXTRAIN_TEST_KILL=2:0), while ranks 0 and 1
// all-gather the model's signature: they form the next generation and train every step as one
// process would, on two ranks.
TEST(MixtrainLaunchFailures, ElasticSurvivesARankLostInDdpsConstruction) {
  TempDir dir("mt_elastic_ddp");
  const std::string common = "--steps 6 --batch-size 48 --log ";
  ASSERT_EQ(run(kTrainArgs + common + (dir / "one.jsonl"), "", dir / "one.out").code, 0);
  const LaunchResult r = run("launch --nproc 3 --elastic -- " + kTrain + common + (dir / "elastic.jsonl"),
                             "MIXTRAIN_TIMEOUT_S=3 MIXTRAIN_TEST_KILL=2:0", dir / "elastic.out");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("generation 1 at step 0: lost rank 2"), std::string::npos) << r.out;
  const auto got = steps_of(dir / "elastic.jsonl");
  expect_same_curve(got, steps_of(dir / "one.jsonl"), 6);
  for (const auto& [step, j] : got) EXPECT_EQ(j.at("rank_rows").size(), 2u) << "step " << step;
}

// The launcher gives its ranks a store token of its own making, in their environment, and a
// joiner without it is refused by the elastic job's store at once.
TEST(MixtrainLaunchFailures, TheLauncherGivesItsRanksAStoreTokenAndTheStoreRefusesOthers) {
  TempDir dir("mt_store_token");
  const LaunchResult r = run("launch --nproc 1 -- sh -c 'echo token of ${#MIXTRAIN_STORE_TOKEN} characters'",
                             "MIXTRAIN_STORE_TOKEN= MIXTRAIN_STORE_TOKEN_FILE=", dir / "token.out");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("token of 32 characters"), std::string::npos) << r.out;
  const int port = 20000 + (::getpid() + 13) % 20000;
  // The store is the launcher's, so the job's ranks need not train: ranks that only wait keep it
  // up for a time that does not depend on how fast this build trains (a sanitizer build trains
  // ten times slower than the 60 s that bound a launch here would allow).
  std::thread job([&] {
    const LaunchResult j = run("launch --nproc 2 --elastic --master-port " + std::to_string(port) +
                                   " -- sh -c 'sleep 8'",
                               "MIXTRAIN_STORE_TOKEN=job-secret MIXTRAIN_TIMEOUT_S=5", dir / "job.out");
    std::ofstream(dir / "job.code") << j.code;
  });
  // The stranger comes once the job's store is up (its banner).
  for (int i = 0; i < 400 && slurp(dir / "job.out").find("its store is tcp://") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto start = std::chrono::steady_clock::now();
  const LaunchResult stranger = run("launch --join --master-port " + std::to_string(port) + " --nproc 1 -- " + kTrain +
                                        "--steps 600 --batch-size 48",
                                    "MIXTRAIN_STORE_TOKEN=guess MIXTRAIN_TIMEOUT_S=5", dir / "stranger.out");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  job.join();
  EXPECT_NE(stranger.code, 0) << stranger.out;
  EXPECT_NE(stranger.out.find("refused this process: its token is not the job's"), std::string::npos) << stranger.out;
  EXPECT_LT(seconds, 5.0) << stranger.out;
  EXPECT_EQ(slurp(dir / "job.code"), "0") << slurp(dir / "job.out");
}

TEST(MixtrainLaunchFailures, BadUsageIsAnError) {
  TempDir dir("mt_elastic_usage");
  for (const char* bad : {"launch --nproc 2 --elastic --max-restarts 1 -- true", "launch --join --nproc 1 -- true",
                          "launch --join --master-port 29511 --nnodes 2 --master-addr 10.0.0.1 --nproc 1 -- true",
                          "launch --nproc 2 --elastic --rank-batches auto -- true",
                          "launch --join --master-port 29511 --nproc 1 --rank-weights adaptive -- true",
                          "launch --nproc 2 --max-restarts -1 -- true"}) {
    const LaunchResult r = run(bad, "", dir / "usage.out");
    EXPECT_EQ(r.code, 2) << bad << ": " << r.out;
  }
}

// The optimizer state a ZeRO-1 rank of four holds (AdamW's moments for a quarter of the GPT's
// parameters) is what the dry run of `mixtrain memory --world-size 4 --zero 1` predicts for it, and a
// quarter of a DDP rank's.
TEST(MixtrainLaunchFailures, ZeroRankHoldsTheOptimizerStateTheDryRunPredicts) {
  TempDir dir("mt_zero_memory");
  const std::string train = std::string(MIXTRAIN_EXE) +
                            " train transformer --synthetic --device cpu --precision fp32 --steps 1 --batch-size 8 ";
  const std::regex state("\\[rank 0\\] final loss .*optimizer state ([0-9]+) B");
  std::smatch m;
  const LaunchResult ddp = run("launch --nproc 4 -- " + train, "OMP_NUM_THREADS=1", dir / "ddp.out");
  ASSERT_EQ(ddp.code, 0) << ddp.out;
  ASSERT_TRUE(std::regex_search(ddp.out, m, state)) << ddp.out;
  const int64_t ddp_bytes = std::stoll(m[1]);
  const LaunchResult zero = run("launch --nproc 4 -- " + train + "--zero 1", "OMP_NUM_THREADS=1", dir / "zero.out");
  ASSERT_EQ(zero.code, 0) << zero.out;
  ASSERT_TRUE(std::regex_search(zero.out, m, state)) << zero.out;
  const int64_t zero_bytes = std::stoll(m[1]);
  EXPECT_LE(zero_bytes, ddp_bytes / 2);
  EXPECT_NEAR(static_cast<double>(zero_bytes), ddp_bytes / 4.0, 0.01 * ddp_bytes);
  // The dry run of rank 0 of four, on the same task (mixtrain train's default transformer).
  mixtrain::cli::StepQuery q;
  q.spec.model = "transformer";
  q.spec.synthetic = true;
  q.global_batch_size = 8;
  q.spec.batch_size = 2;
  q.zero_stage = 1;
  q.world_size = 4;
  const mixtrain::cli::StepPrediction p = mixtrain::cli::predict_step(q);
  const int64_t predicted = p.trace.peak_by_role()[static_cast<size_t>(mixtrain::memory::Role::OptimizerState)];
  EXPECT_NEAR(static_cast<double>(predicted), static_cast<double>(zero_bytes), 0.01 * zero_bytes)
      << "dry run " << predicted << " B, rank 0 " << zero_bytes << " B";
}
