#pragma once
// What `mixtrain launch` leaves behind if it is killed outright (kill -9, the OOM killer): a small
// process forked first, which survives the launcher, learns each rank's process group as the
// ranks start, and when the launcher's end of its pipe closes without the launcher saying it
// finished, kills those groups and removes the launcher's temporary directory.
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
  // The launcher ends normally (it stopped the ranks and removes the directory itself).
  void finish();

 private:
  pid_t pid_ = -1;
  int fd_ = -1;  // write end; the guardian reads the other
};

}  // namespace mixtrain::cli
