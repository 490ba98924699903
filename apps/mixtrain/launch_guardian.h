#pragma once
// What `mixtrain launch` leaves behind if it is killed outright (kill -9 of it or of its process
// group, the OOM killer): a small process forked first, in a process group of its own so that a
// signal to the launcher's group does not reach it, which learns each rank's process group as
// the rank starts and forgets it before the launcher reaps the rank, and when the launcher's end
// of its pipe closes without the launcher saying it finished, says so, kills the groups of the
// ranks still unreaped and removes the launcher's temporary directory.
#include <sys/types.h>

#include <string>

namespace mixtrain::cli {

class LaunchGuardian {
 public:
  // Forks the guardian; `dir` is removed if the launcher dies without calling finish().
  explicit LaunchGuardian(std::string dir);
  ~LaunchGuardian();  // finish()
  LaunchGuardian(const LaunchGuardian&) = delete;
  LaunchGuardian& operator=(const LaunchGuardian&) = delete;

  // A rank's process group, to kill should the launcher die.
  void watch(pid_t process_group);
  // The rank that leads `process_group` has exited and its group is empty: called before the
  // launcher reaps it, while its zombie still holds the id, so that the guardian never signals an
  // id that the system may give to another process.
  void forget(pid_t process_group);
  // Empty while the guardian runs; once it has ended (killed, say), how, e.g. "was killed by
  // signal 9". The launcher without a guardian stops its ranks.
  std::string ended();
  pid_t pid() const { return pid_; }
  // The launcher ends normally (it stopped the ranks and removes the directory itself). Waits at
  // most a second for the guardian to exit, then kills it.
  void finish();

 private:
  void send(char tag, pid_t process_group);
  pid_t pid_ = -1;
  int fd_ = -1;  // write end; the guardian reads the other
  bool reaped_ = false;
  std::string how_ended_;
};

}  // namespace mixtrain::cli
