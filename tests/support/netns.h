#pragma once
// Hosts for multi-host tests on one machine: each host a network namespace with its own loopback
// and one interface (eth0, 10.200.0.<k+1>/24), all joined by a bridge that lives in a namespace
// of its own, so nothing is added to the machine's network. A process started on a host also gets
// a private /tmp (a directory of the host's bind-mounted over it in a mount namespace of its own),
// so nothing can rely on a /tmp the hosts share. Root only; names carry the test process's id and
// a counter (parallel ctest runs never meet), and the destructor kills what still runs in the
// namespaces and deletes them, as does sweep_stale() for test processes that died.
#include <sys/types.h>

#include <string>
#include <vector>

namespace mt_test {

class NetnsHosts {
 public:
  // Empty when hosts can be made here; else why not (not root, no `ip`, no namespaces).
  static std::string unavailable_reason();
  // Deletes the namespaces of earlier test processes that are gone.
  static void sweep_stale();

  explicit NetnsHosts(int hosts);
  ~NetnsHosts();
  NetnsHosts(const NetnsHosts&) = delete;
  NetnsHosts& operator=(const NetnsHosts&) = delete;

  int size() const { return static_cast<int>(names_.size()); }
  const std::string& netns(int host) const { return names_.at(static_cast<size_t>(host)); }
  std::string address(int host) const { return "10.200.0." + std::to_string(host + 1); }
  // The directory each host sees as /tmp.
  const std::string& tmp_dir(int host) const { return tmps_.at(static_cast<size_t>(host)); }
  // Processes still running in the hosts' namespaces (should be none after a job).
  std::vector<pid_t> processes() const;
  // Files left in the hosts' /tmp directories.
  std::vector<std::string> leftover_files() const;

 private:
  void remove_all();
  std::string prefix_, switch_, root_;
  std::vector<std::string> names_, tmps_;
};

// fork + exec of argv with envp, stdout and stderr to log_fd, inside network namespace `netns`
// with `private_tmp` mounted over /tmp (either empty: not moved). Returns the child's pid.
pid_t spawn_process(const std::vector<std::string>& argv, const std::vector<std::string>& envp, int log_fd,
                    const std::string& netns = "", const std::string& private_tmp = "");

}  // namespace mt_test
