#include "progress.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>
#include <string>

namespace mixtrain::cli {

namespace {

std::string clock_time(double seconds) {
  const auto s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  std::ostringstream os;
  if (s >= 3600) os << s / 3600 << ":" << std::setw(2) << std::setfill('0') << (s / 60) % 60;
  else os << s / 60;
  os << ":" << std::setw(2) << std::setfill('0') << s % 60;
  return os.str();
}

}  // namespace

Progress::Progress(std::ostream& out, bool terminal, int64_t first_step, int64_t last_step)
    : out_(out), terminal_(terminal), first_(first_step), last_(last_step), start_(Clock::now()), last_draw_(start_) {}

void Progress::update(const examples::StepRecord& r) {
  loss_sum_ += r.loss;
  ++loss_count_;
  const auto now = Clock::now();
  const int64_t done = r.step - first_ + 1, total = last_ - first_ + 1;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = done / std::max(elapsed, 1e-9);
  const bool final_step = r.step == last_;
  if (terminal_) {
    if (!final_step && std::chrono::duration<double>(now - last_draw_).count() < 0.1) return;
    constexpr int kBar = 24;
    const int filled = static_cast<int>(kBar * done / std::max<int64_t>(total, 1));
    std::ostringstream os;
    os << "\r[" << std::string(static_cast<size_t>(filled), '#') << std::string(static_cast<size_t>(kBar - filled), '.')
       << "] step " << r.step << "/" << last_ << "  loss " << std::fixed << std::setprecision(4)
       << loss_sum_ / static_cast<double>(loss_count_) << "  scale " << std::defaultfloat << r.scale << "  "
       << std::fixed << std::setprecision(1) << rate << " steps/s  ETA "
       << clock_time(static_cast<double>(total - done) / rate) << "   ";
    out_ << os.str() << std::flush;
    drawn_ = true;
    last_draw_ = now;
    loss_sum_ = 0;
    loss_count_ = 0;
    return;
  }
  const int64_t every = std::max<int64_t>(1, total / 20);
  if (done != 1 && done % every != 0 && !final_step) return;
  out_ << "step " << r.step << "/" << last_ << "  loss " << std::fixed << std::setprecision(4)
       << loss_sum_ / static_cast<double>(loss_count_) << "  scale " << std::defaultfloat << r.scale << "  "
       << std::fixed << std::setprecision(1) << rate << " steps/s  ETA "
       << clock_time(static_cast<double>(total - done) / rate) << std::defaultfloat << "\n"
       << std::flush;
  loss_sum_ = 0;
  loss_count_ = 0;
}

void Progress::finish() {
  if (terminal_ && drawn_) out_ << "\n";
  drawn_ = false;
}

}  // namespace mixtrain::cli
