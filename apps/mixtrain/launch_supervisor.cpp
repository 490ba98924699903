// The launcher's supervision of its ranks (launch_supervisor.h).
#include "launch_supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <string>

#include "common/cli.h"

namespace mixtrain::cli {

namespace {

using Clock = std::chrono::steady_clock;

int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  const char c = static_cast<char>(sig);
  [[maybe_unused]] const ssize_t n = write(g_signal_pipe[1], &c, 1);
}

// Signals whose default would end the launcher without a word: forwarded to the ranks, they stop
// the job. (SIGKILL cannot be caught: the guardian speaks for a launcher it ended.)
constexpr int kStopSignals[] = {SIGINT,  SIGTERM, SIGHUP,  SIGQUIT, SIGALRM, SIGVTALRM,
                                SIGPROF, SIGXCPU, SIGXFSZ, SIGPOLL, SIGPWR,  SIGSTKFLT};
// Passed on to the ranks, which decide what they mean.
constexpr int kPassedSignals[] = {SIGUSR1, SIGUSR2};

std::string signal_name(int sig) { return std::string(strsignal(sig)) + " (signal " + std::to_string(sig) + ")"; }

std::string seconds(std::chrono::milliseconds ms) {
  const long long s = ms.count() / 1000, frac = ms.count() % 1000;
  return std::to_string(s) + (frac ? "." + std::to_string(1000 + frac).substr(1) : "") + " s";
}

class Supervisor {
 public:
  Supervisor(RankProcesses& ranks, LaunchGuardian& guardian, const SupervisorOptions& options)
      : ranks_(ranks), guardian_(guardian), o_(options) {}

  int run(const std::function<void(int)>& start_all) {
    start_all(0);
    for (;;) {
      std::vector<RankProcesses::Exit> exits = ranks_.poll(50, g_signal_pipe[0]);
      // Exits seen in one poll: a rank killed by a signal first. Its peers fail when its
      // connections close and may exit within the same poll, so the first exit named is the cause.
      std::stable_partition(exits.begin(), exits.end(), [](const RankProcesses::Exit& x) { return x.code > 128; });
      for (char sig = 0; read(g_signal_pipe[0], &sig, 1) == 1;) on_launcher_signal(sig);
      check_guardian();
      for (const RankProcesses::Exit& x : exits) o_.elastic ? on_elastic_exit(x) : on_exit(x);
      if (Clock::now() > kill_at_) kill_the_rest();
      if (!ranks_.done()) continue;
      if (!restart_next_) return result_;
      ranks_.clear();
      ++restarts_;
      restart_next_ = stopping_ = killed_ = false;
      kill_at_ = Clock::time_point::max();
      start_all(restarts_);
    }
  }

 private:
  void stop_all() {
    if (!stopping_) {
      ranks_.signal_all(SIGTERM);
      kill_at_ = std::min(kill_at_, Clock::now() + o_.stop_grace);
    }
    stopping_ = true;
  }

  void on_launcher_signal(int sig) {
    if (std::find(std::begin(kPassedSignals), std::end(kPassedSignals), sig) != std::end(kPassedSignals)) {
      std::cerr << "mixtrain launch: got " << signal_name(sig) << "; passed on to the ranks\n";
      ranks_.signal_all(sig);
      return;
    }
    restart_next_ = false;
    if (result_ == 0) result_ = 128 + sig;
    if (stopping_) {
      std::cerr << "mixtrain launch: got " << signal_name(sig) << " while stopping; killing the ranks\n";
      ranks_.signal_all(SIGKILL);
      return;
    }
    // Forwarded; the ranks decide how to stop. A second signal ends them.
    std::cerr << "mixtrain launch: got " << signal_name(sig) << "; passed on to the ranks (SIGKILL in "
              << seconds(o_.stop_grace) << " or at a second signal)\n";
    ranks_.signal_all(sig);
    stopping_ = true;
    kill_at_ = std::min(kill_at_, Clock::now() + o_.stop_grace);
  }

  void check_guardian() {
    if (guardian_lost_) return;
    const std::string how = guardian_.ended();
    if (how.empty()) return;
    guardian_lost_ = true;
    std::cerr << "mixtrain launch: its guardian process (pid " << guardian_.pid() << ") " << how
              << "; stopping the ranks: without it, a launcher killed outright would leave them running\n";
    restart_next_ = false;
    if (result_ == 0) result_ = 1;
    stop_all();
  }

  void on_exit(const RankProcesses::Exit& x) {
    if (x.code == 0 || stopping_) return;
    if (restarts_ < o_.max_restarts) {
      std::cerr << "mixtrain launch: rank " << x.rank << " exited with code " << x.code << "; restarting all "
                << o_.ranks_per_host << " ranks of this host from their last checkpoint (restart " << restarts_ + 1
                << " of " << o_.max_restarts << ")\n";
      restart_next_ = true;
    } else {
      result_ = x.code;
      std::cerr << "mixtrain launch: rank " << x.rank << " exited with code " << x.code << "; stopping the others"
                << (o_.max_restarts > 0 ? " (all " + std::to_string(o_.max_restarts) + " restarts used)"
                                        : std::string())
                << "\n";
    }
    stop_all();
  }

  void on_elastic_exit(const RankProcesses::Exit& x) {
    if (finished_by_ >= 0) {
      if (x.code != 0 && !killed_)
        std::cerr << "mixtrain launch: rank " << x.rank << " exited with code " << x.code << " after rank "
                  << finished_by_ << " finished the job; not the job's code (--elastic)\n";
      return;
    }
    if (stopping_) return;
    if (x.code == 0) {
      // The job's work is done: the members finish together; what still runs was dropped.
      finished_by_ = x.rank;
      result_ = 0;
      kill_at_ = std::min(kill_at_, Clock::now() + o_.timeout);
      return;
    }
    // The others go on without it; if none finishes the job, its code is the last rank's.
    std::cerr << "mixtrain launch: rank " << x.rank << " exited with code " << x.code
              << "; the others go on without it (--elastic)\n";
    result_ = x.code;
  }

  void kill_the_rest() {
    if (killed_) {
      ranks_.signal_all(SIGKILL);
      return;
    }
    killed_ = true;
    for (int rank : ranks_.running_ranks()) {
      if (finished_by_ >= 0)
        std::cerr << "mixtrain launch: rank " << rank << " still runs " << seconds(o_.timeout) << " after rank "
                  << finished_by_ << " finished the job: the job dropped it (stopped or hung); killing it\n";
      else
        std::cerr << "mixtrain launch: rank " << rank << " still runs " << seconds(o_.stop_grace)
                  << " after SIGTERM; killing it\n";
    }
    ranks_.signal_all(SIGKILL);
  }

  RankProcesses& ranks_;
  LaunchGuardian& guardian_;
  const SupervisorOptions o_;
  int result_ = 0, restarts_ = 0;
  int finished_by_ = -1;  // the first rank of an elastic job to exit 0
  bool stopping_ = false, restart_next_ = false, killed_ = false, guardian_lost_ = false;
  Clock::time_point kill_at_ = Clock::time_point::max();
};

}  // namespace

void install_launcher_signals() {
  if (pipe2(g_signal_pipe, O_NONBLOCK | O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("launch: pipe failed: ") + std::strerror(errno));
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : kStopSignals) sigaction(sig, &sa, nullptr);
  for (int sig : kPassedSignals) sigaction(sig, &sa, nullptr);
}

void remove_launcher_signals() {
  for (int sig : kStopSignals) signal(sig, SIG_DFL);
  for (int sig : kPassedSignals) signal(sig, SIG_DFL);
  for (int& fd : g_signal_pipe) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

int supervise(RankProcesses& ranks, LaunchGuardian& guardian, const SupervisorOptions& options,
              const std::function<void(int restart)>& start_all) {
  return Supervisor(ranks, guardian, options).run(start_all);
}

std::chrono::seconds job_timeout() {
  const char* v = std::getenv("MIXTRAIN_TIMEOUT_S");
  if (!v || !*v) return std::chrono::seconds(300);
  char* end = nullptr;
  errno = 0;
  const long s = std::strtol(v, &end, 10);
  if (errno != 0 || *end != '\0' || s <= 0 || s >= (1L << 30))
    throw examples::cli::UsageError(std::string("launch: MIXTRAIN_TIMEOUT_S=\"") + v +
                                    "\" is not a positive whole number of seconds");
  return std::chrono::seconds(s);
}

}  // namespace mixtrain::cli
