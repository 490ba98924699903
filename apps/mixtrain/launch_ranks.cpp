// The rank processes of `mixtrain launch` (launch_ranks.h).
#include "launch_ranks.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace mixtrain::cli {

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

struct RankProcesses::Child {
  pid_t pid = -1;
  int out = -1;  // read end of the rank's stdout+stderr
  std::string pending;
  bool running = false;
  int rank = 0;

  void flush_lines(bool all) {
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1)
      std::cout << "[rank " << rank << "] " << pending.substr(start, nl - start + 1);
    pending.erase(0, start);
    if (all && !pending.empty()) {
      std::cout << "[rank " << rank << "] " << pending << "\n";
      pending.clear();
    }
    std::cout.flush();
  }

  // Reads what the pipe holds now (it is non-blocking); at end of file, flushes and closes it.
  void read_available() {
    char buf[4096];
    ssize_t n;
    while ((n = read(out, buf, sizeof(buf))) > 0) pending.append(buf, static_cast<size_t>(n));
    flush_lines(false);
    if (n == 0) close_output();
  }

  void close_output() {
    flush_lines(true);
    close(out);
    out = -1;
  }
};

RankProcesses::RankProcesses(std::vector<std::string> program, LaunchGuardian& guardian)
    : program_(std::move(program)), guardian_(guardian) {}

RankProcesses::~RankProcesses() { clear(); }

void RankProcesses::start(int rank, std::vector<std::string> env) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("launch: pipe failed");
  const pid_t launcher = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("launch: fork failed");
  if (pid == 0) {
    setpgid(0, 0);  // its own process group: a signal reaches the rank's children too
    // Killed with the launcher, however the launcher ends (the guardian gets its children).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != launcher) _exit(1);
    // The launcher's handlers go with exec; what it ignores (SIGPIPE) would not.
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE}) signal(sig, SIG_DFL);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> envp, args;
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> prog = program_;
    for (auto& s : prog) args.push_back(s.data());
    args.push_back(nullptr);
    environ = envp.data();
    execvp(args[0], args.data());
    std::fprintf(stderr, "mixtrain launch: cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  guardian_.watch(pid);
  close(fds[1]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  Child c;
  c.pid = pid;
  c.out = fds[0];
  c.running = true;
  c.rank = rank;
  children_.push_back(std::move(c));
}

std::vector<RankProcesses::Exit> RankProcesses::poll(int timeout_ms, int wake_fd) {
  std::vector<pollfd> fds;
  for (auto& c : children_)
    if (c.out >= 0) fds.push_back({c.out, POLLIN, 0});
  if (wake_fd >= 0) fds.push_back({wake_fd, POLLIN, 0});
  ::poll(fds.data(), fds.size(), timeout_ms);
  for (Child& c : children_)
    if (c.out >= 0) c.read_available();
  std::vector<Exit> exits;
  for (Child& c : children_) {
    siginfo_t info{};
    if (c.running && waitid(P_PID, static_cast<id_t>(c.pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == c.pid)
      exits.push_back({c.rank, reap(c)});
  }
  // A rank's child process may hold the pipe; stop reading once every rank has exited. What a
  // rank wrote between the read above and its exit is still in the pipe: read it first.
  if (!running())
    for (Child& c : children_)
      if (c.out >= 0) {
        c.read_available();
        if (c.out >= 0) c.close_output();
      }
  return exits;
}

void RankProcesses::signal_all(int sig) {
  for (const Child& c : children_)
    if (c.running) kill(-c.pid, sig);
}

bool RankProcesses::running() const {
  for (const Child& c : children_)
    if (c.running) return true;
  return false;
}

std::vector<int> RankProcesses::running_ranks() const {
  std::vector<int> ranks;
  for (const Child& c : children_)
    if (c.running) ranks.push_back(c.rank);
  return ranks;
}

bool RankProcesses::done() const {
  for (const Child& c : children_)
    if (c.running || c.out >= 0) return false;
  return true;
}

int RankProcesses::reap(Child& c) {
  // The rank has exited but is not reaped: its zombie keeps its pid, which is its process group's
  // id, from going to another process. So now, and only now, is it safe to kill what the rank left
  // in its group, and to tell the guardian to forget the group before the id is free again.
  kill(-c.pid, SIGKILL);
  guardian_.forget(c.pid);
  int status = 0;
  while (waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
  }
  c.running = false;
  return exit_code(status);
}

void RankProcesses::clear() {
  // Whatever a rank left in its process group goes with it (a reaped rank's went when it was reaped).
  for (Child& c : children_) {
    if (c.running) {
      kill(-c.pid, SIGKILL);
      // SIGKILL ends a stopped process too; a second bounds what the launcher waits for one that
      // cannot die (stuck in the kernel), which the guardian then still watches.
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      siginfo_t info{};
      while (waitid(P_PID, static_cast<id_t>(c.pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0 &&
             std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (info.si_pid == c.pid) reap(c);
      else std::cerr << "mixtrain launch: rank " << c.rank << " (pid " << c.pid << ") did not end 1 s after SIGKILL\n";
    }
    if (c.out >= 0) close(c.out);
  }
  children_.clear();
}

}  // namespace mixtrain::cli
