// The multi-process harness of tests/distributed (ranks.h).
#include "ranks.h"

#include "support/netns.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace mt_dist_test {

namespace {
std::map<std::string, Scenario>& registry() {
  static std::map<std::string, Scenario> r;
  return r;
}

std::string read_all(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
}  // namespace

bool register_scenario(const std::string& name, Scenario fn) {
  registry()[name] = std::move(fn);
  return true;
}

std::vector<RankResult> run_ranks(const std::string& scenario, int world, std::chrono::seconds deadline,
                                  const std::map<int, std::vector<std::string>>& extra_env,
                                  const std::vector<RankPlacement>& placement) {
  char tmpl[] = "/tmp/mt-dist-test-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  std::vector<pid_t> pids(static_cast<size_t>(world), -1);
  std::vector<std::string> logs;
  for (int r = 0; r < world; ++r) {
    logs.push_back(dir + "/rank" + std::to_string(r) + ".log");
    std::vector<std::string> env = {"MT_DIST_SCENARIO=" + scenario,
                                    "RANK=" + std::to_string(r),
                                    "WORLD_SIZE=" + std::to_string(world),
                                    "LOCAL_RANK=" + std::to_string(r),
                                    "LOCAL_WORLD_SIZE=" + std::to_string(world),
                                    "MIXTRAIN_STORE=file:" + dir + "/store",
                                    "MT_DIST_TMP=" + dir,
                                    "OMP_NUM_THREADS=1"};
    // Extra entries first: the first of a name is the one getenv finds (a rank's own before those
    // of every rank).
    auto all = extra_env.find(-1);
    if (all != extra_env.end()) env.insert(env.begin(), all->second.begin(), all->second.end());
    auto it = extra_env.find(r);
    if (it != extra_env.end()) env.insert(env.begin(), it->second.begin(), it->second.end());
    for (char** e = environ; *e; ++e) {
      const std::string s = *e;
      const std::string key = s.substr(0, s.find('='));
      bool overridden = false;
      for (const auto& x : env) overridden = overridden || x.substr(0, x.find('=')) == key;
      if (!overridden) env.push_back(s);
    }
    const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
    const std::vector<std::string> argv = {exe, "--gtest_filter=DistWorker.DISABLED_Run",
                                           "--gtest_also_run_disabled_tests", "--gtest_brief=1"};
    const int fd = open(logs.back().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const RankPlacement where = placement.empty() ? RankPlacement{} : placement.at(static_cast<size_t>(r));
    const pid_t pid = mt_test::spawn_process(argv, env, fd, where.netns, where.private_tmp);
    close(fd);
    pids[static_cast<size_t>(r)] = pid;
  }
  std::vector<RankResult> results(static_cast<size_t>(world));
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + deadline;
  int left = world;
  while (left > 0) {
    for (int r = 0; r < world; ++r) {
      pid_t& pid = pids[static_cast<size_t>(r)];
      if (pid <= 0) continue;
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        results[static_cast<size_t>(r)].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        results[static_cast<size_t>(r)].seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        pid = -1;
        --left;
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > end) {
      // The watchdog: no process outlives the test.
      for (int r = 0; r < world; ++r) {
        pid_t& pid = pids[static_cast<size_t>(r)];
        if (pid <= 0) continue;
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
        results[static_cast<size_t>(r)].timed_out = true;
        pid = -1;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int r = 0; r < world; ++r) results[static_cast<size_t>(r)].log = read_all(logs[static_cast<size_t>(r)]);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return results;
}

std::string describe(const std::vector<RankResult>& results) {
  std::ostringstream os;
  for (size_t r = 0; r < results.size(); ++r) {
    os << "--- rank " << r << ": exit " << results[r].exit_code << (results[r].timed_out ? " (killed at deadline)" : "")
       << "\n"
       << results[r].log << "\n";
  }
  return os.str();
}

}  // namespace mt_dist_test

// The worker entry: started by run_ranks only (disabled, so a plain run never lists it).
TEST(DistWorker, DISABLED_Run) {
  const char* name = std::getenv("MT_DIST_SCENARIO");
  if (!name) GTEST_SKIP() << "only run_ranks starts this worker";
  auto& r = mt_dist_test::registry();
  auto it = r.find(name);
  int code = 3;
  if (it == r.end()) {
    std::fprintf(stderr, "unknown scenario %s\n", name);
  } else {
    try {
      code = it->second();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "scenario %s threw: %s\n", name, e.what());
      code = 2;
    }
  }
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(code);  // skip static destructors: a failed group may still hold Gloo threads
}
