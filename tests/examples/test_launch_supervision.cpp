// `mixtrain launch` when its own parts or its ranks are interfered with: its guardian killed or
// stopped, the launcher's whole process group killed, a rank's process-group id reused by another
// process, a signal whose default would end it, a stopped rank in an elastic job that finished,
// an error after its temporary directory exists. Each launcher runs in a session of its own; its
// ranks write their pids (and their children's) into the test's directory, and the test ends
// those and nothing else.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A process that runs (a zombie has ended).
bool alive(pid_t pid) {
  const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

// Waits up to `seconds` for `done`; whether it came.
template <class F>
bool eventually(double seconds, F done) {
  const auto until = Clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (Clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = slurp(e.path().string() + "/stat");
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(stat.substr(paren + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return out;
}

// `mixtrain launch ARGS` in a session of its own, with TMPDIR in the test's directory. PROGRAM's
// ranks append their pids to pids() (`echo $$ >> $PIDS`); the destructor kills what is left of
// the launcher's group and of those pids, then removes the directory.
class Launcher {
 public:
  Launcher(const std::string& name, const std::string& args, const std::vector<std::string>& env = {}) {
    dir_ = ::testing::TempDir() + name + "_" + std::to_string(::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_ + "/tmp");
    std::vector<std::string> envp = {"TMPDIR=" + tmp(), "PIDS=" + pids_file(), "D=" + dir_};
    envp.insert(envp.end(), env.begin(), env.end());
    for (char** e = environ; *e; ++e) {
      const std::string s = *e, key = s.substr(0, s.find('=') + 1);
      bool ours = false;
      for (const auto& x : envp) ours = ours || x.compare(0, key.size(), key) == 0;
      if (!ours) envp.push_back(s);
    }
    std::string command = "exec " + std::string(MIXTRAIN_EXE) + " " + args;
    std::vector<char*> argv = {const_cast<char*>("sh"), const_cast<char*>("-c"), command.data(), nullptr}, envv;
    for (auto& s : envp) envv.push_back(s.data());
    envv.push_back(nullptr);
    const int fd = open((dir_ + "/out").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    pid_ = fork();
    if (pid_ == 0) {  // only async-signal-safe calls until exec
      setsid();
      dup2(fd, 1);
      dup2(fd, 2);
      execve("/bin/sh", argv.data(), envv.data());
      _exit(127);
    }
    close(fd);
  }
  ~Launcher() {
    if (code_ == kRunning) {  // a failed test: the launcher's group, and a guardian not in it
      if (guardian_ > 0 && alive(guardian_)) kill(guardian_, SIGKILL);
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    for (pid_t p : pids())
      if (alive(p)) kill(p, SIGKILL);
    fs::remove_all(dir_);
  }
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& dir() const { return dir_; }
  std::string tmp() const { return dir_ + "/tmp"; }
  std::string pids_file() const { return dir_ + "/pids"; }
  std::string output() const { return slurp(dir_ + "/out"); }
  std::vector<pid_t> pids() const {
    std::vector<pid_t> out;
    std::ifstream in(pids_file());
    for (long p; in >> p;) out.push_back(static_cast<pid_t>(p));
    return out;
  }
  // The launcher's exit code once it has exited within `seconds` (128 + signal if killed), else
  // kRunning.
  int wait(double seconds) {
    if (code_ != kRunning) return code_;
    int status = 0;
    eventually(seconds, [&] { return waitpid(pid_, &status, WNOHANG) == pid_ && (code_ = decode(status), true); });
    return code_;
  }
  double seconds_since(Clock::time_point t) const { return std::chrono::duration<double>(Clock::now() - t).count(); }
  // The guardian: the launcher's child that is not a rank (the ranks are `sh`).
  pid_t guardian() {
    for (pid_t c : children_of(pid_))
      if (slurp("/proc/" + std::to_string(c) + "/comm") != "sh\n") return guardian_ = c;
    return -1;
  }
  bool nothing_left() const {
    for (pid_t p : pids())
      if (alive(p)) return false;
    return fs::is_empty(tmp());
  }

  static constexpr int kRunning = -1000;

 private:
  static int decode(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }
  std::string dir_;
  pid_t pid_ = -1, guardian_ = -1;
  int code_ = kRunning;
};

// Each rank records itself and a child sleeping in its process group, then waits on it.
const std::string kRanksWithChildren = "-- sh -c 'echo $$ >> $PIDS; sleep 60 & echo $! >> $PIDS; wait'";

bool all_started(const Launcher& l, size_t n) {
  return eventually(20, [&] { return l.pids().size() >= n; });
}

}  // namespace

// The guardian killed: the launcher stops its ranks and their children, says why, exits 1 (not
// SIGPIPE's 141 once the ranks end on their own).
TEST(MixtrainLaunchSupervision, ItsGuardianKilledTheLauncherStopsTheRanksAndSaysWhy) {
  Launcher l("mt_guardian_killed", "launch --nproc 2 " + kRanksWithChildren);
  ASSERT_TRUE(all_started(l, 4)) << l.output();
  const pid_t guardian = l.guardian();
  ASSERT_GT(guardian, 0) << l.output();
  ASSERT_EQ(kill(guardian, SIGKILL), 0);
  EXPECT_EQ(l.wait(15), 1) << l.output();
  EXPECT_NE(l.output().find("its guardian process (pid " + std::to_string(guardian) + ") was killed by signal 9"),
            std::string::npos)
      << l.output();
  EXPECT_TRUE(eventually(3, [&] { return l.nothing_left(); })) << l.output();
}

// A guardian that is stopped does not hold the launcher's end: it is waited for a second, then killed.
TEST(MixtrainLaunchSupervision, AStoppedGuardianDoesNotHoldTheLaunchersEnd) {
  Launcher l("mt_guardian_stopped",
             "launch --nproc 1 -- sh -c 'echo $$ >> $PIDS; until [ -e $D/go ]; do sleep 0.05; "
             "done'");
  ASSERT_TRUE(all_started(l, 1)) << l.output();
  const pid_t guardian = l.guardian();
  ASSERT_GT(guardian, 0) << l.output();
  ASSERT_EQ(kill(guardian, SIGSTOP), 0);
  std::ofstream(l.dir() + "/go").put('\n');
  const auto t0 = Clock::now();
  EXPECT_EQ(l.wait(10), 0) << l.output();
  EXPECT_LT(l.seconds_since(t0), 3.5) << "the rank ends within 0.05 s, the guardian is waited for 1 s";
  EXPECT_FALSE(alive(guardian));
  EXPECT_TRUE(l.nothing_left());
}

// `kill -9 -PGID` of the launcher's process group: the guardian is not in it; it kills the ranks'
// groups (the ranks' children too), removes the temporary directory and says so.
TEST(MixtrainLaunchSupervision, KilledWithItsProcessGroupItLeavesNoProcessOrDirectory) {
  Launcher l("mt_group_killed", "launch --nproc 2 " + kRanksWithChildren);
  ASSERT_TRUE(all_started(l, 4)) << l.output();
  ASSERT_FALSE(fs::is_empty(l.tmp()));
  ASSERT_EQ(kill(-l.pid(), SIGKILL), 0);
  EXPECT_EQ(l.wait(5), 128 + SIGKILL);
  EXPECT_TRUE(eventually(3, [&] { return l.nothing_left(); })) << "processes or " << l.tmp() << " outlived it";
  EXPECT_TRUE(eventually(3, [&] { return l.output().find("ended without stopping its ranks") != std::string::npos; }))
      << l.output();
}

// A signal whose default would end the launcher silently: SIGPIPE is ignored; SIGHUP is passed on
// to the ranks and named, and the launcher ends with 128 + 1. The ranks get SIGPIPE's default.
TEST(MixtrainLaunchSupervision, NoSignalEndsItWithoutAWord) {
  Launcher l("mt_signals",
             "launch --nproc 2 -- sh -c 'echo $$ >> $PIDS; grep SigIgn /proc/self/status > "
             "$D/sigign$RANK; sleep 60 & echo $! >> $PIDS; wait'");
  ASSERT_TRUE(all_started(l, 4)) << l.output();
  ASSERT_EQ(kill(l.pid(), SIGPIPE), 0);
  EXPECT_EQ(l.wait(0.5), Launcher::kRunning) << "SIGPIPE ended it: " << l.output();
  ASSERT_EQ(kill(l.pid(), SIGHUP), 0);
  EXPECT_EQ(l.wait(15), 128 + SIGHUP) << l.output();
  EXPECT_NE(l.output().find("got Hangup (signal 1); passed on to the ranks"), std::string::npos) << l.output();
  EXPECT_TRUE(eventually(3, [&] { return l.nothing_left(); }));
  const std::string ignored = slurp(l.dir() + "/sigign0");
  ASSERT_EQ(ignored.rfind("SigIgn:", 0), 0u) << ignored;
  const unsigned long long mask = std::stoull(ignored.substr(7), nullptr, 16);
  EXPECT_EQ(mask & (1ull << (SIGPIPE - 1)), 0u) << "a rank inherited the launcher's SIG_IGN for SIGPIPE: " << ignored;
}

// --elastic: ranks 0 and 1 finish the job, rank 2 was stopped (SIGSTOP) and dropped. The launcher
// kills it one timeout later and ends with the job's status, 0; a dropped rank that wakes up
// (SIGCONT) and fails after the job finished does not decide the code either.
TEST(MixtrainLaunchSupervision, AnElasticJobEndsWhenItsWorkIsDone) {
  {
    Launcher l("mt_elastic_stopped",
               "launch --nproc 3 --elastic -- sh -c 'echo $$ >> $PIDS; if [ $RANK = 2 ]; then "
               "kill -STOP $$; fi'",
               {"MIXTRAIN_TIMEOUT_S=2"});
    ASSERT_TRUE(all_started(l, 3)) << l.output();
    const auto t0 = Clock::now();
    EXPECT_EQ(l.wait(20), 0) << l.output();
    EXPECT_LT(l.seconds_since(t0), 2 + 1.5) << l.output();
    EXPECT_NE(l.output().find("rank 2 still runs 2 s after rank "), std::string::npos) << l.output();
    EXPECT_NE(l.output().find("the job dropped it (stopped or hung); killing it"), std::string::npos) << l.output();
    EXPECT_TRUE(eventually(3, [&] { return l.nothing_left(); }));
  }
  Launcher l("mt_elastic_woken",
             "launch --nproc 3 --elastic -- sh -c 'echo $$ >> $PIDS; if [ $RANK = 2 ]; then "
             "kill -STOP $$; exit 1; fi; touch $D/done$RANK'",
             {"MIXTRAIN_TIMEOUT_S=20"});
  ASSERT_TRUE(all_started(l, 3)) << l.output();
  ASSERT_TRUE(eventually(20, [&] { return fs::exists(l.dir() + "/done0") && fs::exists(l.dir() + "/done1"); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the launcher has seen them exit
  for (pid_t p : l.pids()) kill(p, SIGCONT);
  EXPECT_EQ(l.wait(10), 0) << l.output();
  EXPECT_NE(l.output().find("rank 2 exited with code 1 after rank "), std::string::npos) << l.output();
  EXPECT_TRUE(l.nothing_left());
}

// The same with `mixtrain train`: rank 2 of 3 is stopped at step 5 of 150; the others drop it
// within the timeout (3 s) and finish every step, and the launcher ends with 0 instead of
// waiting for the stopped rank.
TEST(MixtrainLaunchSupervision, AnElasticTrainingRunWithAStoppedRankEndsWithItsStatus) {
  Launcher l("mt_elastic_train_stopped",
             "launch --nproc 3 --elastic -- sh -c 'echo $$ >> $PIDS; echo $$ > $D/pid$RANK; exec " +
                 std::string(MIXTRAIN_EXE) +
                 " train mlp --synthetic --device cpu --precision fp32 --steps 150 --batch-size 48 --log "
                 "$D/log.jsonl'",
             {"MIXTRAIN_TIMEOUT_S=3", "OMP_NUM_THREADS=1"});
  auto logged = [&] {
    std::ifstream in(l.dir() + "/log.jsonl");
    int lines = 0;
    for (std::string line; std::getline(in, line);) ++lines;
    return lines;
  };
  ASSERT_TRUE(eventually(30, [&] { return logged() >= 5 && fs::exists(l.dir() + "/pid2"); })) << l.output();
  ASSERT_EQ(kill(static_cast<pid_t>(std::stol(slurp(l.dir() + "/pid2"))), SIGSTOP), 0);
  const int stopped_at = logged();
  ASSERT_LT(stopped_at, 150) << "the run ended before rank 2 was stopped";
  EXPECT_EQ(l.wait(50), 0) << l.output();
  EXPECT_EQ(logged(), 150) << l.output();
  EXPECT_NE(l.output().find("rank 2 still runs 3 s after rank "), std::string::npos) << l.output();
  EXPECT_TRUE(eventually(3, [&] { return l.nothing_left(); }));
}

// An error after the temporary directory exists (an elastic job's store port taken) removes it.
TEST(MixtrainLaunchSupervision, AnErrorAfterItsDirectoryExistsRemovesIt) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string port = std::to_string(ntohs(a.sin_port));
  Launcher l("mt_port_taken", "launch --nproc 1 --elastic --master-port " + port + " -- true");
  const int code = l.wait(20);
  close(fd);
  EXPECT_NE(code, 0) << l.output();
  EXPECT_NE(code, Launcher::kRunning) << l.output();
  EXPECT_TRUE(fs::is_empty(l.tmp())) << "the launcher's temporary directory stayed: " << l.output();
}

// The timeout that bounds the launcher's waits is the ranks' own: one they would refuse stops the
// launcher before any rank starts.
TEST(MixtrainLaunchSupervision, ATimeoutTheRanksWouldRefuseIsAUsageError) {
  for (const char* bad : {"0", "-3", "5s", "99999999999"}) {
    Launcher l("mt_bad_timeout", "launch --nproc 1 -- sh -c 'echo $$ >> $PIDS'",
               {std::string("MIXTRAIN_TIMEOUT_S=") + bad});
    EXPECT_EQ(l.wait(20), 2) << bad << ": " << l.output();
    EXPECT_NE(l.output().find(std::string("MIXTRAIN_TIMEOUT_S=\"") + bad + "\" is not a positive whole number"),
              std::string::npos)
        << l.output();
    EXPECT_TRUE(l.pids().empty()) << bad << ": a rank started";
  }
}

// When the launcher dies, its guardian signals only the process groups of ranks still unreaped:
// a rank that exited and was reaped frees its id, which another process may get. In a pid
// namespace of the test's own (its pids are quiet, and everything in it ends with it), rank 1
// exits and is reaped, a process of that same id leading a group of its own starts (the pid is
// chosen through ns_last_pid), the launcher is killed, and that process must survive.
TEST(MixtrainLaunchSupervision, ItsGuardianSignalsOnlyRanksStillUnreaped) {
  if (std::system("unshare --pid --fork --kill-child --mount-proc true >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "needs a pid namespace of its own (unshare --pid as root) to give a reaped rank's id to another "
                    "process";
  const std::string dir = ::testing::TempDir() + "mt_pid_reuse_" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir + "/tmp");
  {
    std::ofstream script(dir + "/run.sh");
    script << "export D=" << dir << "\n"
           << "TMPDIR=$D/tmp " << MIXTRAIN_EXE
           << " launch --nproc 2 -- sh -c 'if [ $RANK = 1 ]; then echo $$ > $D/rank1; exit 0; fi; sleep 60 & wait' "
              ">$D/launch.out 2>&1 &\n"
              "launcher=$!\n"
              "i=0; until [ -s $D/rank1 ]; do sleep 0.05; i=$((i+1)); [ $i -lt 400 ] || exit 3; done\n"
              "p=$(cat $D/rank1)\n"
              "i=0; while [ -e /proc/$p ]; do sleep 0.05; i=$((i+1)); [ $i -lt 400 ] || exit 4; done\n"
              "echo $((p - 1)) > /proc/sys/kernel/ns_last_pid\n"
              "setsid sleep 61 &\n"
              "victim=$!\n"
              "[ $victim = $p ] || { echo \"the new process got pid $victim, not $p\"; exit 5; }\n"
              "sleep 0.2\n"
              "kill -9 $launcher\n"
              "sleep 2\n"
              "state=$(cut -d' ' -f3 /proc/$victim/stat 2>/dev/null)\n"
              "if [ -n \"$state\" ] && [ \"$state\" != Z ]; then echo victim-alive; else echo victim-killed; fi\n";
  }
  const int status = std::system(
      ("timeout -s KILL 40 unshare --pid --fork --kill-child --mount-proc sh " + dir + "/run.sh >" + dir + "/out 2>&1")
          .c_str());
  const std::string out = slurp(dir + "/out"), launch_out = slurp(dir + "/launch.out");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out << launch_out;
  EXPECT_NE(out.find("victim-alive"), std::string::npos) << out << launch_out;
  EXPECT_TRUE(fs::is_empty(dir + "/tmp")) << launch_out;
  fs::remove_all(dir);
}
