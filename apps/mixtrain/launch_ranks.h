#pragma once
// The rank processes of `mixtrain launch` on this host: each started in a process group of its
// own with its environment (PR_SET_PDEATHSIG: it dies with the launcher), its output read and
// printed line by line with a "[rank r] " prefix, its exit reaped and reported; what it leaves in
// its process group is killed when it exits.
#include <sys/types.h>

#include <string>
#include <vector>

#include "launch_guardian.h"

namespace mixtrain::cli {

// 128 + signal for a rank killed by a signal, as a shell reports it.
int exit_code(int status);

class RankProcesses {
 public:
  struct Exit {
    int rank = 0;
    int code = 0;
  };
  RankProcesses(std::vector<std::string> program, LaunchGuardian& guardian);
  ~RankProcesses();  // kills what still runs (and its process group)
  RankProcesses(const RankProcesses&) = delete;
  RankProcesses& operator=(const RankProcesses&) = delete;

  // Starts PROGRAM as `rank` (for the prefix) with exactly `env` as its environment.
  void start(int rank, std::vector<std::string> env);
  // Waits up to timeout_ms for output, an exit or `wake_fd` (-1: none) to become readable; prints
  // complete lines and returns the ranks that exited meanwhile.
  std::vector<Exit> poll(int timeout_ms, int wake_fd);
  void signal_all(int sig);  // to each running rank's process group
  bool running() const;      // some rank has not exited
  std::vector<int> running_ranks() const;
  bool done() const;         // every rank exited and its output is drained
  // Kills every process group and forgets the ranks (before starting a new set).
  void clear();

 private:
  struct Child;
  int reap(Child& c);  // its exit code
  std::vector<std::string> program_;
  LaunchGuardian& guardian_;
  std::vector<Child> children_;
};

}  // namespace mixtrain::cli
