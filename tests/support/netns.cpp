// Network-namespace hosts for multi-host tests (netns.h).
#include "support/netns.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace mt_test {

namespace {

constexpr const char* kPrefix = "mtnet-";

int sh(const std::string& cmd) {
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void must(const std::string& cmd) {
  if (sh(cmd + " >/dev/null 2>&1") != 0) {
    // Run again to show what failed.
    std::string out;
    if (FILE* p = popen((cmd + " 2>&1").c_str(), "r")) {
      char buf[512];
      while (fgets(buf, sizeof(buf), p)) out += buf;
      pclose(p);
    }
    throw std::runtime_error("netns: `" + cmd + "` failed: " + out);
  }
}

std::vector<pid_t> pids_in(const std::string& ns) {
  std::vector<pid_t> out;
  if (FILE* p = popen(("ip netns pids " + ns + " 2>/dev/null").c_str(), "r")) {
    long pid;
    while (fscanf(p, "%ld", &pid) == 1) out.push_back(static_cast<pid_t>(pid));
    pclose(p);
  }
  return out;
}

void remove_namespace(const std::string& ns) {
  for (int round = 0; round < 50; ++round) {
    const auto pids = pids_in(ns);
    if (pids.empty()) break;
    for (pid_t p : pids) kill(p, SIGKILL);
    usleep(20000);
  }
  sh("ip netns del " + ns + " >/dev/null 2>&1");
}

}  // namespace

std::string NetnsHosts::unavailable_reason() {
  if (geteuid() != 0) return "network-namespace hosts need root (ip netns add); this test runs as uid " +
                             std::to_string(geteuid());
  if (sh("command -v ip >/dev/null 2>&1") != 0) return "the `ip` command (iproute2) is not installed";
  // Each simulated host gets a /tmp of its own (bind-mounted over /tmp), which hides a build there.
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (self.rfind("/tmp/", 0) == 0)
    return "the build is under /tmp (" + self + "), which each simulated host replaces with its own; build elsewhere";
  const std::string probe = std::string(kPrefix) + std::to_string(getpid()) + "-probe";
  if (sh("ip netns add " + probe + " >/dev/null 2>&1") != 0) return "`ip netns add` fails here (no namespaces?)";
  sh("ip netns del " + probe + " >/dev/null 2>&1");
  return "";
}

void NetnsHosts::sweep_stale() {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/run/netns", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + std::strlen(kPrefix), nullptr, 10);
    if (pid > 0 && (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH)) continue;  // its test still runs
    remove_namespace(name);
  }
}

NetnsHosts::NetnsHosts(int hosts) {
  static std::atomic<int> counter{0};
  prefix_ = std::string(kPrefix) + std::to_string(getpid()) + "-" + std::to_string(counter++);
  switch_ = prefix_ + "-sw";
  char tmpl[] = "/tmp/mt-netns-XXXXXX";
  if (!mkdtemp(tmpl)) throw std::runtime_error("netns: mkdtemp failed");
  root_ = tmpl;
  try {
    must("ip netns add " + switch_);
    must("ip -n " + switch_ + " link add br0 type bridge");
    must("ip -n " + switch_ + " link set br0 up");
    for (int k = 0; k < hosts; ++k) {
      const std::string ns = prefix_ + "-h" + std::to_string(k);
      names_.push_back(ns);
      tmps_.push_back(root_ + "/host" + std::to_string(k) + "-tmp");
      std::filesystem::create_directories(tmps_.back());
      must("ip netns add " + ns);
      must("ip -n " + ns + " link set lo up");
      const std::string port = "p" + std::to_string(k);
      must("ip -n " + switch_ + " link add " + port + " type veth peer name eth0 netns " + ns);
      must("ip -n " + switch_ + " link set " + port + " master br0 up");
      must("ip -n " + ns + " addr add " + address(k) + "/24 dev eth0");
      must("ip -n " + ns + " link set eth0 up");
    }
  } catch (...) {
    remove_all();
    throw;
  }
}

NetnsHosts::~NetnsHosts() { remove_all(); }

void NetnsHosts::remove_all() {
  for (const auto& ns : names_) remove_namespace(ns);
  if (!switch_.empty()) remove_namespace(switch_);
  names_.clear();
  switch_.clear();
  std::error_code ec;
  if (!root_.empty()) std::filesystem::remove_all(root_, ec);
  root_.clear();
}

std::vector<pid_t> NetnsHosts::processes() const {
  std::vector<pid_t> out;
  for (const auto& ns : names_)
    for (pid_t p : pids_in(ns)) out.push_back(p);
  return out;
}

std::vector<std::string> NetnsHosts::leftover_files() const {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& dir : tmps_)
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir, ec)) out.push_back(e.path().string());
  return out;
}

pid_t spawn_process(const std::vector<std::string>& argv, const std::vector<std::string>& envp, int log_fd,
                    const std::string& netns, const std::string& private_tmp) {
  std::vector<std::string> args = argv, env = envp;
  std::vector<char*> a, e;
  for (auto& s : args) a.push_back(s.data());
  a.push_back(nullptr);
  for (auto& s : env) e.push_back(s.data());
  e.push_back(nullptr);
  const std::string ns_path = "/run/netns/" + netns;
  const pid_t pid = fork();
  if (pid != 0) return pid;
  // The child: only async-signal-safe calls from here to exec (no allocation).
  dup2(log_fd, 1);
  dup2(log_fd, 2);
  if (!netns.empty()) {
    const int fd = open(ns_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
      dprintf(2, "spawn_process: cannot enter network namespace %s: %s\n", netns.c_str(), strerror(errno));
      _exit(126);
    }
  }
  if (!private_tmp.empty()) {
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount(private_tmp.c_str(), "/tmp", nullptr, MS_BIND, nullptr) != 0) {
      dprintf(2, "spawn_process: cannot mount %s over /tmp: %s\n", private_tmp.c_str(), strerror(errno));
      _exit(126);
    }
  }
  execve(a[0], a.data(), e.data());
  dprintf(2, "spawn_process: cannot run %s: %s\n", a[0], strerror(errno));
  _exit(127);
}

}  // namespace mt_test
