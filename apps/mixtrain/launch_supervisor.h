#pragma once
// What `mixtrain launch` does while its ranks run: it forwards the signals it gets, reacts to each
// rank's exit (stop the others, restart them all, or let them go on under --elastic), stops the
// ranks if its guardian dies, and decides the job's exit code.
//
// The exit code: without --elastic, that of the first rank to fail (the others are stopped: SIGTERM,
// SIGKILL 10 s later), else 0. Under --elastic, 0 once any rank has exited 0: the members of the
// last generation finish the last step together, so a rank still running a timeout
// ($MIXTRAIN_TIMEOUT_S, else 300 s) after that is one the job dropped (stopped or hung); it is
// killed and its code is not the job's. If no rank finished the job, the code of the last rank to
// exit. A stop signal (SIGINT, SIGTERM, SIGHUP, ...) is forwarded and gives 128 + signal; a lost
// guardian gives 1 (or the failing rank's code).
#include <chrono>
#include <functional>

#include "launch_guardian.h"
#include "launch_ranks.h"

namespace mixtrain::cli {

struct SupervisorOptions {
  bool elastic = false;
  int max_restarts = 0;
  int ranks_per_host = 1;
  // How long the ranks left after an elastic job finished may take to end.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // How long a stopped rank may take between SIGTERM and SIGKILL.
  std::chrono::milliseconds stop_grace{std::chrono::seconds(10)};
};

// Installs the launcher's signal handling: the stop and passed-on signals are delivered to
// supervise()'s loop. (The launcher ignores SIGPIPE itself, from before it forks its guardian.)
void install_launcher_signals();
// Restores what install_launcher_signals changed (the handlers and the pipe).
void remove_launcher_signals();

// Runs the job until its ranks have ended: start_all(restart) starts this host's ranks (restart
// 0 first). Returns the job's exit code.
int supervise(RankProcesses& ranks, LaunchGuardian& guardian, const SupervisorOptions& options,
              const std::function<void(int restart)>& start_all);

// $MIXTRAIN_TIMEOUT_S as the ranks read it (a positive whole number of seconds), else 300 s.
std::chrono::seconds job_timeout();

}  // namespace mixtrain::cli
