// `mixtrain launch` across hosts and when things go wrong: --nnodes/--node-rank/--master-addr on
// two hosts (network namespaces, support/netns.h) trains bit for bit as --nproc 2 on one host; a
// launcher killed outright takes its ranks and its temporary directory with it; weights whose sum
// overflows and a global batch smaller than the ranks are clear errors on every rank.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/netns.h"

extern char** environ;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> this_environment() {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  return env;
}

// Runs `sh -c cmd` on each host at once (a namespace and its private /tmp; host -1: here) and
// waits up to `limit` seconds; exit codes in host order, outputs in logs.
std::vector<int> run_on_hosts(const mt_test::NetnsHosts& net, const std::vector<std::pair<int, std::string>>& cmds,
                              int limit, std::vector<std::string>& logs) {
  char tmpl[] = "/tmp/mt-launch-mh-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  std::vector<pid_t> pids;
  std::vector<std::string> paths;
  for (size_t k = 0; k < cmds.size(); ++k) {
    paths.push_back(dir + "/host" + std::to_string(k) + ".log");
    const int fd = open(paths.back().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const int h = cmds[k].first;
    pids.push_back(mt_test::spawn_process({"/bin/sh", "-c", cmds[k].second}, this_environment(), fd,
                                          h < 0 ? "" : net.netns(h), h < 0 ? "" : net.tmp_dir(h)));
    close(fd);
  }
  std::vector<int> codes(cmds.size(), -1);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(limit);
  for (size_t k = 0; k < pids.size(); ++k) {
    int status = 0;
    while (waitpid(pids[k], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > end) kill(pids[k], SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    codes[k] = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  for (const auto& p : paths) logs.push_back(read_file(p));
  std::filesystem::remove_all(dir);
  return codes;
}

std::vector<double> losses_in(const std::string& path) {
  std::vector<double> v;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) v.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  return v;
}

const std::string kTrain = std::string(MIXTRAIN_EXE) +
                           " train mlp --synthetic --device cpu --precision fp32 --steps 3 --batch-size 48";

}  // namespace

TEST(MixtrainLaunchMultiHost, TwoHostsTrainBitIdenticalToOneHost) {
  const std::string why = mt_test::NetnsHosts::unavailable_reason();
  if (!why.empty()) GTEST_SKIP() << why;
  mt_test::NetnsHosts::sweep_stale();
  mt_test::NetnsHosts net(3);
  const std::string exe = MIXTRAIN_EXE;
  std::vector<std::string> logs;
  // Each host's rank 0 logs into the /tmp that host sees.
  const std::string train = kTrain + " --log /tmp/losses.jsonl";
  const auto codes = run_on_hosts(
      net,
      {{0, "OMP_NUM_THREADS=1 MIXTRAIN_TIMEOUT_S=20 " + exe + " launch --nnodes 2 --node-rank 0 --master-addr " +
               net.address(0) + " --master-port 29400 --nproc 1 --run-id mh -- " + train},
       {1, "OMP_NUM_THREADS=1 MIXTRAIN_TIMEOUT_S=20 " + exe + " launch --nnodes 2 --node-rank 1 --master-addr " +
               net.address(0) + " --master-port 29400 --nproc 1 --run-id mh -- " + train},
       {2, "OMP_NUM_THREADS=1 " + exe + " launch --nproc 2 -- " + train}},
      60, logs);
  for (size_t k = 0; k < codes.size(); ++k) ASSERT_EQ(codes[k], 0) << "host " << k << ":\n" << logs[k];
  EXPECT_NE(logs[0].find("[rank 0] final loss"), std::string::npos) << logs[0];
  EXPECT_EQ(logs[1].find("final loss"), std::string::npos) << "rank 1 reports nothing: " << logs[1];
  const auto two_hosts = losses_in(net.tmp_dir(0) + "/losses.jsonl");
  const auto one_host = losses_in(net.tmp_dir(2) + "/losses.jsonl");
  ASSERT_EQ(one_host.size(), 3u);
  EXPECT_EQ(two_hosts, one_host);  // bit for bit: the same ranks, the same sums
  EXPECT_FALSE(std::filesystem::exists(net.tmp_dir(1) + "/losses.jsonl"));
  std::filesystem::remove(net.tmp_dir(0) + "/losses.jsonl");
  std::filesystem::remove(net.tmp_dir(2) + "/losses.jsonl");
  EXPECT_TRUE(net.leftover_files().empty()) << net.leftover_files()[0];
  EXPECT_TRUE(net.processes().empty());
}

TEST(MixtrainLaunch, KilledOutrightItTakesItsRanksAndDirectoryWithIt) {
  char tmpl[] = "/tmp/mt-launch-kill-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  struct Cleanup {
    std::string dir, nap;
    ~Cleanup() {
      std::system(("pkill -KILL -f '[s]leep " + nap + "'").c_str());
      std::filesystem::remove_all(dir);
    }
  };
  const std::string nap = "43." + std::to_string(::getpid() % 1000);  // names this test's sleeps
  const Cleanup cleanup{dir, nap};
  // Each rank records its store directory, then waits on a child of its own (a grandchild of the
  // launcher, in the rank's process group).
  {
    std::ofstream script(dir + "/run.sh");
    script << MIXTRAIN_EXE << " launch --nproc 2 -- sh -c 'echo ${MIXTRAIN_STORE#file:} > " << dir
           << "/store$RANK; sleep " << nap << " & wait' >/dev/null 2>&1 &\necho $! > " << dir << "/pid\n";
  }
  ASSERT_EQ(std::system(("sh " + dir + "/run.sh").c_str()), 0);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((!std::filesystem::exists(dir + "/store1") || !std::filesystem::exists(dir + "/store0") ||
          std::system(("pgrep -f '[s]leep " + nap + "' >/dev/null").c_str()) != 0) &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const pid_t launcher = static_cast<pid_t>(std::stol(read_file(dir + "/pid")));
  std::string store = read_file(dir + "/store0");
  store = store.substr(0, store.find('\n'));
  const std::string launch_dir = std::filesystem::path(store).parent_path().string();
  ASSERT_TRUE(std::filesystem::exists(launch_dir)) << launch_dir;
  ASSERT_EQ(kill(launcher, SIGKILL), 0);
  bool gone = false;
  for (int k = 0; k < 150 && !gone; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gone = std::system(("pgrep -f '[s]leep " + nap + "' >/dev/null").c_str()) != 0 && !std::filesystem::exists(launch_dir);
  }
  EXPECT_TRUE(gone) << "ranks or " << launch_dir << " outlived the launcher by 3 s";
}

TEST(MixtrainLaunch, WeightsBeyondADoubleAndBatchesSmallerThanTheRanksAreClearErrors) {
  const std::string exe = MIXTRAIN_EXE;
  const std::string out = ::testing::TempDir() + "mt_launch_bad_" + std::to_string(::getpid());
  auto run = [&](const std::string& args) {
    const int status = std::system(("timeout -s KILL 50 " + exe + " " + args + " >" + out + " 2>&1").c_str());
    return std::make_pair(WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(out));
  };
  auto [code, text] = run("launch --nproc 2 --rank-weights 1e308,1e308 -- " + kTrain);
  EXPECT_EQ(code, 2) << text;
  EXPECT_NE(text.find("beyond a double"), std::string::npos) << text;
  // Under another launcher each rank reads the weights and stops with the same message. The
  // launcher stops the other rank as soon as one exits, so a slower rank may be stopped before it
  // gets there: the first to stop must say why.
  std::tie(code, text) = run("launch --nproc 2 -- sh -c 'MIXTRAIN_RANK_WEIGHTS=1e308,1e308 exec " + kTrain + "'");
  EXPECT_EQ(code, 1) << text;
  const std::string why = "mixtrain train: rank weights \"1e308,1e308\": the weights add up to inf";
  EXPECT_TRUE(text.find("[rank 0] " + why) != std::string::npos || text.find("[rank 1] " + why) != std::string::npos)
      << text;
  // One row for two ranks: the first rank to stop says why (the launcher may stop the other before
  // it gets there), and no rank blames the other for leaving.
  std::tie(code, text) = run("launch --nproc 2 -- " + exe +
                             " train mlp --synthetic --device cpu --precision fp32 --steps 2 --batch-size 1");
  EXPECT_EQ(code, 1) << text;
  const std::string split = "mixtrain train: data parallel: a global batch of 1 rows split over 2 ranks";
  EXPECT_TRUE(text.find("[rank 0] " + split) != std::string::npos || text.find("[rank 1] " + split) != std::string::npos)
      << text;
  EXPECT_EQ(text.find("Connection"), std::string::npos) << text;
  std::remove(out.c_str());
}
