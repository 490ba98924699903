#pragma once
// Training progress for the terminal. On a TTY one status line redrawn in place with '\r', at
// most ten times a second, never wider than the terminal (fields drop out, least useful first,
// when it is narrow): bar, step, this step's loss and the mean of the last steps, loss scale,
// rate over the last steps and ETA. Otherwise (a pipe or a file) plain lines, about twenty over
// the run, so logs stay readable.
#include <chrono>
#include <cstdint>
#include <deque>
#include <ostream>
#include <string>

#include <mixtrain/train/train_loop.h>

namespace mixtrain::cli {

// The width to draw in: $COLUMNS when it is a positive number, else the terminal's (ioctl on
// `fd`), else 80.
int terminal_columns(int fd);

class Progress {
 public:
  // Steps in the rate and loss windows.
  static constexpr size_t kWindow = 20;

  Progress(std::ostream& out, bool terminal, int columns, int64_t first_step, int64_t last_step);
  void update(const train::StepRecord& record);
  // Ends the redrawn line (terminal) so later output starts on a fresh one.
  void finish();

  // The status line for the current state, at most `columns` - 1 characters (the last column is
  // left free: writing there wraps on some terminals), with a bar when there is room and `bar`.
  std::string status_line(int columns, bool bar = true) const;

 private:
  using Clock = std::chrono::steady_clock;
  double rate() const;  // steps per second over the window; 0 when unknown

  std::ostream& out_;
  bool terminal_;
  int columns_;
  int64_t first_, last_;
  train::StepRecord latest_;
  std::deque<double> losses_;            // the last kWindow steps' losses
  std::deque<Clock::time_point> ends_;   // when each of the last kWindow + 1 steps ended
  double first_step_seconds_ = 0;        // the rate before two steps have ended
  Clock::time_point last_draw_{};
  bool drawn_ = false;
};

}  // namespace mixtrain::cli
