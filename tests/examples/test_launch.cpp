// `mixtrain launch`: the launch contract in each rank's environment, rank-prefixed output, a
// failing rank stopping the others with its exit code, and `mixtrain train` under it following
// the single-process loss curve, with shares by weight, sized to each rank's memory or following
// each rank's speed.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include <mixtrain/memory/device_memory.h>

#include "memory_predict.h"
#include "support/testing.h"

namespace {

struct LaunchRun {
  int code = -1;
  std::string out;
  double seconds = 0;
};

LaunchRun launch(const std::string& args, const std::string& env = "") {
  const std::string out = ::testing::TempDir() + "mixtrain_launch_" + std::to_string(::getpid()) + ".out";
  const std::string cmd = "timeout -s KILL 50 env " + env + " " + std::string(MIXTRAIN_EXE) + " " + args + " >" +
                          out + " 2>&1 </dev/null";
  const auto t0 = std::chrono::steady_clock::now();
  const int status = std::system(cmd.c_str());
  LaunchRun r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  r.out = ss.str();
  std::remove(out.c_str());
  return r;
}

std::vector<double> losses(const std::string& log) {
  std::vector<double> v;
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);) v.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  return v;
}

}  // namespace

TEST(MixtrainLaunch, SetsTheLaunchContractAndPrefixesOutput) {
  const LaunchRun r = launch("launch --nproc 3 -- sh -c 'echo env $RANK $WORLD_SIZE $LOCAL_RANK $OMP_NUM_THREADS; "
                       "case $MIXTRAIN_STORE in file:/*) echo store-ok;; esac'",
                       "-u OMP_NUM_THREADS");
  ASSERT_EQ(r.code, 0) << r.out;
  const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  const std::string threads = std::to_string(std::max(1L, cores / 3));
  for (int k = 0; k < 3; ++k) {
    const std::string rank = std::to_string(k);
    EXPECT_NE(r.out.find("[rank " + rank + "] env " + rank + " 3 " + rank + " " + threads + "\n"), std::string::npos)
        << r.out;
  }
  EXPECT_NE(r.out.find("[rank 2] store-ok"), std::string::npos) << r.out;
  // A user's OMP_NUM_THREADS is kept.
  const LaunchRun kept = launch("launch --nproc 2 -- sh -c 'echo threads $OMP_NUM_THREADS'", "OMP_NUM_THREADS=7");
  EXPECT_NE(kept.out.find("[rank 1] threads 7"), std::string::npos) << kept.out;
}

TEST(MixtrainLaunch, AFailingRankStopsTheOthersAndSetsTheExitCode) {
  // Rank 1 fails at once; rank 0 (and its child sleep) would run 40 s if not stopped.
  const std::string nap = "40." + std::to_string(::getpid() % 1000);  // names this test's sleep
  const LaunchRun r = launch("launch --nproc 2 -- sh -c 'if [ $RANK = 1 ]; then exit 7; fi; sleep " + nap + "; true'");
  EXPECT_EQ(r.code, 7) << r.out;
  EXPECT_LT(r.seconds, 20.0);
  EXPECT_NE(r.out.find("rank 1 exited with code 7"), std::string::npos) << r.out;
  // Nothing of rank 0 lives on to finish its work.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_NE(std::system(("pgrep -f '[s]leep " + nap + "' >/dev/null").c_str()), 0);
}

TEST(MixtrainLaunch, BadUsageIsAnError) {
  EXPECT_EQ(launch("launch -- true").code, 2);
  EXPECT_EQ(launch("launch --nproc 2").code, 2);
  EXPECT_EQ(launch("launch --nproc 2 --rank-weights 1,2,3 -- true").code, 2);
  for (const char* bad : {"launch --nproc 2 --rank-batches manual -- true",
                          "launch --nproc 2 --rank-batches auto --rank-weights 1,1 -- true",
                          "launch --nproc 2 --rank-memory 1GiB -- true",
                          "launch --nproc 2 --rank-batches auto --rank-memory 1GiB,2GiB,3GiB -- true",
                          "launch --nproc 2 --rank-batches auto --rank-memory 8XB -- true",
                          "launch --nproc 2 --rank-batches auto --rank-memory 1GiB, -- true"}) {
    const LaunchRun r = launch(bad);
    EXPECT_EQ(r.code, 2) << bad << ": " << r.out;
    EXPECT_NE(r.out.find("--rank-"), std::string::npos) << bad << ": " << r.out;
  }
  const LaunchRun missing = launch("launch --nproc 2 -- /nonexistent/program");
  EXPECT_EQ(missing.code, 127) << missing.out;
}

// The global --batch-size split over two ranks (evenly, then 3:1) follows the single process's
// losses up to summation order: the MLP (rows) and the transformer (sequences).
TEST(MixtrainLaunch, TrainUnderTheLauncherFollowsTheSingleProcessLossCurve) {
  const std::string dir = ::testing::TempDir();
  for (const std::string common : {"train mlp --synthetic --device cpu --precision fp32 --steps 4 --batch-size 64",
                                   "train transformer --synthetic --device cpu --precision fp32 --steps 4 "
                                   "--batch-size 8"}) {
    const std::string single = dir + "mt_single_" + std::to_string(::getpid()) + ".jsonl";
    const LaunchRun one = launch(common + " --log " + single);
    ASSERT_EQ(one.code, 0) << one.out;
    for (const char* weights : {"", "--rank-weights 3,1 "}) {
      const std::string multi = dir + "mt_multi_" + std::to_string(::getpid()) + ".jsonl";
      const LaunchRun two = launch(std::string("launch --nproc 2 ") + weights + "-- " + MIXTRAIN_EXE + " " + common +
                                   " --log " + multi);
      ASSERT_EQ(two.code, 0) << two.out;
      EXPECT_NE(two.out.find("[rank 0] final loss"), std::string::npos) << two.out;
      EXPECT_EQ(two.out.find("[rank 1] final loss"), std::string::npos) << two.out;  // rank 0 reports
      const auto a = losses(single), b = losses(multi);
      ASSERT_EQ(a.size(), 4u);
      ASSERT_EQ(b.size(), 4u) << "(both ranks wrote the log?)";
      for (size_t k = 0; k < a.size(); ++k)
        EXPECT_NEAR(b[k], a[k], 1e-4 * std::max(1.0, std::abs(a[k]))) << common << " " << weights;
      std::remove(multi.c_str());
    }
    std::remove(single.c_str());
  }
}

// --rank-weights adaptive: both ranks share core 0 and rank 1 runs at nice 10, so it computes
// its share several times slower; its rows move to rank 0 within the run, and every step still
// follows the single process's loss up to summation order, whatever the split. Under
// --memory-plan each new split is planned afresh instead of missing the old split's plan.
TEST(MixtrainLaunch, AdaptiveRankWeightsMoveRowsToTheFasterRankAndKeepTheLossCurve) {
  if (std::system("command -v taskset >/dev/null && command -v nice >/dev/null") != 0)
    GTEST_SKIP() << "needs taskset and nice to make one rank slower than the other";
  const std::string dir = ::testing::TempDir(), id = std::to_string(::getpid());
  const std::string single = dir + "mt_adaptive_single_" + id + ".jsonl";
  const std::string multi = dir + "mt_adaptive_multi_" + id + ".jsonl";
  const std::string common = "train mlp --synthetic --device cpu --precision fp32 --steps 16 --batch-size 256";
  const LaunchRun one = launch(common + " --log " + single);
  ASSERT_EQ(one.code, 0) << one.out;
  const std::string exe = MIXTRAIN_EXE;
  const LaunchRun two = launch("launch --nproc 2 --rank-weights adaptive -- sh -c 'if [ $RANK = 1 ]; then "
                               "slow=\"nice -n 10\"; fi; exec taskset -c 0 $slow " +
                                   exe + " " + common + " --memory-plan --log " + multi + "'",
                               "OMP_NUM_THREADS=1");
  ASSERT_EQ(two.code, 0) << two.out;
  const auto a = losses(single), b = losses(multi);
  ASSERT_EQ(a.size(), 16u);
  ASSERT_EQ(b.size(), 16u) << "(both ranks wrote the log?)";
  for (size_t k = 0; k < a.size(); ++k)
    EXPECT_NEAR(b[k], a[k], 1e-4 * std::max(1.0, std::abs(a[k]))) << "step " << k + 1;
  std::ifstream in(multi);
  int64_t most_moved = 0;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json step = nlohmann::json::parse(line);
    EXPECT_EQ(step.at("plan_misses").get<int64_t>(), 0) << line;
    const auto rows = step.at("rank_rows").get<std::vector<int64_t>>();
    ASSERT_EQ(rows.size(), 2u) << line;
    EXPECT_EQ(rows[0] + rows[1], 256) << line;
    EXPECT_GE(rows[1], 1) << line;
    most_moved = std::max(most_moved, rows[0] - rows[1]);
  }
  EXPECT_GE(most_moved, 20) << "rank 0 never took more rows than rank 1 at nice 10 on the same core: " << two.out;
  std::remove(single.c_str());
  std::remove(multi.c_str());
}

TEST(MixtrainLaunch, ForwardsSigtermToEveryRank) {
  const std::string nap = "41." + std::to_string(::getpid() % 1000);
  const std::string out = ::testing::TempDir() + "mixtrain_launch_sig_" + std::to_string(::getpid()) + ".out";
  const std::string cmd = "timeout -s KILL 50 sh -c '" + std::string(MIXTRAIN_EXE) +
                          " launch --nproc 2 -- sleep " + nap + " & pid=$!; sleep 1; kill -TERM $pid; wait $pid; "
                          "echo exit=$?' >" + out + " 2>&1";
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  std::remove(out.c_str());
  EXPECT_NE(ss.str().find("exit=143"), std::string::npos) << ss.str();  // 128 + SIGTERM
  EXPECT_NE(std::system(("pgrep -f '[s]leep " + nap + "' >/dev/null").c_str()), 0);
}

namespace {
namespace cli = mixtrain::cli;

// The launcher's --rank-batches auto search for one rank of `mixtrain train mlp --synthetic
// --device cpu --precision fp32 --batch-size global` with `budget` bytes.
int64_t mlp_rank_fit(int64_t global, int64_t budget) {
  cli::StepQuery q;
  q.spec.model = "mlp";
  q.spec.synthetic = true;
  q.precision = mixtrain::train::Precision::Fp32;
  q.global_batch_size = global;
  const cli::FitResult fit = cli::fit_batch(q, budget, global, cli::FitBy::Allocated);
  return fit.fits ? fit.best.batch_size : 0;
}

int64_t mlp_rank_peak(int64_t global, int64_t rows) {
  cli::StepQuery q;
  q.spec.model = "mlp";
  q.spec.synthetic = true;
  q.spec.batch_size = rows;
  q.precision = mixtrain::train::Precision::Fp32;
  q.global_batch_size = global;
  return cli::predict_step(q).peak_bytes;
}

}  // namespace

// Two ranks with different memory caps: each finds its largest share of the global batch by dry
// run, the shares follow those fits, and the steps are still the single process's on the whole
// batch. A cap no share fits in ends every rank with an error naming each rank's fit.
TEST(MixtrainLaunch, RankBatchesAutoSizesEachRanksShareToItsMemory) {
  const int64_t global = 48;
  const int64_t cap0 = mlp_rank_peak(global, 32), cap1 = mlp_rank_peak(global, 16);
  const int64_t fit0 = mlp_rank_fit(global, cap0), fit1 = mlp_rank_fit(global, cap1);
  ASSERT_GE(fit0, 32);
  ASSERT_GE(fit1, 16);
  ASSERT_LT(fit1, fit0);
  ASSERT_GE(fit0 + fit1, global);
  const std::vector<int64_t> shares = mixtrain::distributed::DistributedSampler::split(
      global, {static_cast<double>(fit0), static_cast<double>(fit1)});

  const std::string dir = ::testing::TempDir();
  const std::string common = "train mlp --synthetic --device cpu --precision fp32 --steps 3 --batch-size " +
                             std::to_string(global);
  const std::string single = dir + "mt_rb_single_" + std::to_string(::getpid()) + ".jsonl";
  const LaunchRun one = launch(common + " --log " + single);
  ASSERT_EQ(one.code, 0) << one.out;
  const std::string multi = dir + "mt_rb_multi_" + std::to_string(::getpid()) + ".jsonl";
  const LaunchRun two = launch("launch --nproc 2 --rank-batches auto --rank-memory " + std::to_string(cap0) + "," +
                               std::to_string(cap1) + " -- " + MIXTRAIN_EXE + " " + common + " --log " + multi);
  ASSERT_EQ(two.code, 0) << two.out;
  for (int r = 0; r < 2; ++r) {
    const std::string expect = "rank " + std::to_string(r) + ": " + mixtrain::memory::format_bytes(r ? cap1 : cap0) + " fits " +
                               std::to_string(r ? fit1 : fit0) + ", takes " + std::to_string(shares[size_t(r)]);
    EXPECT_NE(two.out.find(expect), std::string::npos) << expect << " missing from:\n" << two.out;
  }
  const auto a = losses(single), b = losses(multi);
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t k = 0; k < a.size(); ++k) EXPECT_NEAR(b[k], a[k], 1e-4 * std::max(1.0, std::abs(a[k])));
  std::remove(single.c_str());
  std::remove(multi.c_str());

  const LaunchRun none = launch("launch --nproc 2 --rank-batches auto --rank-memory " + std::to_string(cap0) +
                                ",1KiB -- " + MIXTRAIN_EXE + " " + common);
  EXPECT_EQ(none.code, 1) << none.out;
  EXPECT_NE(none.out.find("rank 0 fits " + std::to_string(fit0)), std::string::npos) << none.out;
  EXPECT_NE(none.out.find("rank 1 fits 0 in 1.00 KiB"), std::string::npos) << none.out;
}
