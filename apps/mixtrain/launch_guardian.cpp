// The launcher's guardian (launch_guardian.h). Its protocol on the pipe: 'G' + a process group id
// (native int) per rank, 'D' when the launcher finishes; end of file without 'D' means the
// launcher died.
#include "launch_guardian.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
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

[[noreturn]] void guard(int fd, const std::string& dir) {
  // Signals meant for the launcher (Ctrl-C reaches its whole process group) must not end the
  // guardian: it is what cleans up if the launcher does not.
  signal(SIGINT, SIG_IGN);
  signal(SIGTERM, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  std::vector<pid_t> groups;
  for (;;) {
    char tag = 0;
    if (!read_full(fd, &tag, 1)) break;  // the launcher is gone
    if (tag == 'D') _exit(0);
    pid_t pg = 0;
    if (tag != 'G' || !read_full(fd, &pg, sizeof(pg))) break;
    groups.push_back(pg);
  }
  for (pid_t pg : groups) kill(-pg, SIGKILL);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  _exit(0);
}

}  // namespace

LaunchGuardian::LaunchGuardian(std::string dir) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("launch: pipe failed: ") + strerror(errno));
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error(std::string("launch: fork failed: ") + strerror(errno));
  if (pid_ == 0) {
    close(fds[1]);
    guard(fds[0], dir);
  }
  close(fds[0]);
  fd_ = fds[1];
}

LaunchGuardian::~LaunchGuardian() { finish(); }

void LaunchGuardian::watch(pid_t process_group) {
  char msg[1 + sizeof(pid_t)] = {'G'};
  std::memcpy(msg + 1, &process_group, sizeof(pid_t));
  [[maybe_unused]] const ssize_t n = write(fd_, msg, sizeof(msg));
}

void LaunchGuardian::finish() {
  if (fd_ < 0) return;
  const char done = 'D';
  [[maybe_unused]] const ssize_t n = write(fd_, &done, 1);
  close(fd_);
  fd_ = -1;
  waitpid(pid_, nullptr, 0);
}

}  // namespace mixtrain::cli
