// `mixtrain launch`: the launch contract in each rank's environment, rank-prefixed output, a
// failing rank stopping the others with its exit code, and `mixtrain train` under it following
// the single-process loss curve.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

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
    }
  }
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
  EXPECT_NE(ss.str().find("exit=143"), std::string::npos) << ss.str();  // 128 + SIGTERM
  EXPECT_NE(std::system(("pgrep -f '[s]leep " + nap + "' >/dev/null").c_str()), 0);
}
