#pragma once
// Training progress for the terminal: on a TTY one status line redrawn in place with '\r'
// (a bar, step, loss, loss scale, steps/s, ETA), at most ten times a second; otherwise plain
// lines, about twenty over the run, so logs stay readable.
#include <chrono>
#include <cstdint>
#include <ostream>

#include "common/train_loop.h"

namespace mixtrain::cli {

class Progress {
 public:
  Progress(std::ostream& out, bool terminal, int64_t first_step, int64_t last_step);
  void update(const examples::StepRecord& record);
  // Ends the redrawn line (terminal) so later output starts on a fresh one.
  void finish();

 private:
  using Clock = std::chrono::steady_clock;
  std::ostream& out_;
  bool terminal_;
  int64_t first_, last_;
  Clock::time_point start_, last_draw_;
  double loss_sum_ = 0;  // losses since the last plain line (plain mode) or over the last steps
  int64_t loss_count_ = 0;
  bool drawn_ = false;
};

}  // namespace mixtrain::cli
