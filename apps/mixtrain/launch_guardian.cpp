// The launcher's guardian (launch_guardian.h). Its protocol on the pipe: 'G' + a process group id
// (native pid_t) per rank started, 'R' + the id when that rank has exited (sent before the launcher
// reaps it), 'D' when the launcher finishes; end of file without 'D' means the launcher died.
#include "launch_guardian.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>
#include <vector>

namespace mixtrain::cli {

namespace {

bool read_full(int fd, void* buf, size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

void say(const std::string& line) {
  const std::string text = "mixtrain launch: " + line + "\n";
  [[maybe_unused]] const ssize_t n = write(2, text.data(), text.size());
}

// Kills the groups and waits (at most a second) until they are empty, so that nothing of theirs
// writes into `dir` once it is removed.
void kill_groups_and_remove(const std::vector<pid_t>& groups, const std::string& dir) {
  for (pid_t pg : groups) kill(-pg, SIGKILL);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  auto any_left = [&] { return std::any_of(groups.begin(), groups.end(), [](pid_t pg) { return kill(-pg, 0) == 0; }); };
  while (any_left() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

[[noreturn]] void guard(int fd, const std::string& dir, pid_t launcher) {
  // Out of the launcher's process group: `kill -9 -PGID` of the launcher's group (or Ctrl-C) does
  // not reach the process that cleans up after it. Signals meant for the launcher must not end
  // it; its last words go to a stderr that may be closed or a terminal it is in the background of.
  setpgid(0, 0);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGTTOU}) signal(sig, SIG_IGN);
  std::vector<pid_t> groups;
  for (;;) {
    char tag = 0;
    if (!read_full(fd, &tag, 1)) break;  // the launcher is gone
    if (tag == 'D') _exit(0);
    pid_t pg = 0;
    if ((tag != 'G' && tag != 'R') || !read_full(fd, &pg, sizeof(pg))) break;
    if (tag == 'G') groups.push_back(pg);
    else groups.erase(std::remove(groups.begin(), groups.end(), pg), groups.end());
  }
  // The ranks themselves die with the launcher (PR_SET_PDEATHSIG); their groups hold their children.
  kill_groups_and_remove(groups, dir);
  const std::string what = "ended without stopping its ranks (killed outright, or crashed)";
  say("the launcher (pid " + std::to_string(launcher) + ") " + what +
      "; its guardian killed the process groups of the " + std::to_string(groups.size()) +
      " ranks still running and removed " + dir);
  _exit(0);
}

std::string how_it_ended(int status) {
  if (WIFSIGNALED(status)) {
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  }
  return "exited with code " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

}  // namespace

LaunchGuardian::LaunchGuardian(std::string dir) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("launch: pipe failed: ") + strerror(errno));
  const pid_t launcher = getpid();
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error(std::string("launch: fork failed: ") + strerror(errno));
  if (pid_ == 0) {
    close(fds[1]);
    guard(fds[0], dir, launcher);
  }
  setpgid(pid_, pid_);  // as the guardian does itself: whichever runs first
  close(fds[0]);
  fd_ = fds[1];
}

LaunchGuardian::~LaunchGuardian() { finish(); }

void LaunchGuardian::send(char tag, pid_t process_group) {
  if (fd_ < 0) return;
  char msg[1 + sizeof(pid_t)] = {tag};
  std::memcpy(msg + 1, &process_group, sizeof(pid_t));
  // A pipe write this small is all or nothing. A guardian that is gone makes it fail with EPIPE
  // (the launcher ignores SIGPIPE); ended() reports that.
  while (write(fd_, msg, sizeof(msg)) < 0 && errno == EINTR) {
  }
}

void LaunchGuardian::watch(pid_t process_group) { send('G', process_group); }

void LaunchGuardian::forget(pid_t process_group) { send('R', process_group); }

std::string LaunchGuardian::ended() {
  int status = 0;
  if (!reaped_ && pid_ > 0 && waitpid(pid_, &status, WNOHANG) == pid_) {
    reaped_ = true;
    how_ended_ = how_it_ended(status);
  }
  return how_ended_;
}

void LaunchGuardian::finish() {
  if (fd_ < 0) return;
  const char done = 'D';
  while (write(fd_, &done, 1) < 0 && errno == EINTR) {
  }
  close(fd_);
  fd_ = -1;
  // A guardian that is stopped (SIGSTOP) or stuck must not hold the launcher's exit.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (ended().empty() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (!reaped_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    reaped_ = true;
  }
}

}  // namespace mixtrain::cli
