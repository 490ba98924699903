#include "progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <numeric>
#include <sstream>
#include <vector>

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

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}

std::string general(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

int terminal_columns(int fd) {
  if (const char* env = std::getenv("COLUMNS")) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && n > 0 && n < 100000) return static_cast<int>(n);
  }
  winsize ws{};
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

Progress::Progress(std::ostream& out, bool terminal, int columns, int64_t first_step, int64_t last_step)
    : out_(out), terminal_(terminal), columns_(std::max(columns, 1)), first_(first_step), last_(last_step) {}

double Progress::rate() const {
  if (ends_.size() >= 2) {
    const double span = std::chrono::duration<double>(ends_.back() - ends_.front()).count();
    if (span > 0) return static_cast<double>(ends_.size() - 1) / span;
  }
  return first_step_seconds_ > 0 ? 1.0 / first_step_seconds_ : 0.0;
}

std::string Progress::status_line(int columns, bool bar) const {
  const int64_t done = latest_.step - first_ + 1, total = last_ - first_ + 1;
  const double r = rate();
  const double mean = losses_.empty() ? 0.0
                                      : std::accumulate(losses_.begin(), losses_.end(), 0.0) /
                                            static_cast<double>(losses_.size());
  // Fields by priority (the first ones stay longest); shown in display order.
  struct Field {
    int order;
    std::string text;
  };
  std::vector<Field> fields = {
      {1, "step " + std::to_string(latest_.step) + "/" + std::to_string(last_)},
      {2, "loss " + fixed(latest_.loss, 4)},
      {6, "ETA " + (r > 0 ? clock_time(static_cast<double>(total - done) / r) : std::string("--"))},
      {5, (r > 0 ? fixed(r, r < 10 ? 2 : 1) : std::string("--")) + " steps/s"},
      {3, "mean " + fixed(mean, 4) + " (last " + std::to_string(losses_.size()) + ")"},
      {4, "scale " + general(latest_.scale)},
  };
  const int budget = columns - 1;
  auto width_of = [](const std::vector<Field>& fs) {
    int w = 0;
    for (const auto& f : fs) w += static_cast<int>(f.text.size()) + 2;
    return w - 2;
  };
  while (fields.size() > 1 && width_of(fields) > budget) fields.pop_back();
  std::sort(fields.begin(), fields.end(), [](const Field& a, const Field& b) { return a.order < b.order; });
  std::string line;
  for (const auto& f : fields) line += (line.empty() ? "" : "  ") + f.text;
  // The bar takes what is left, 10 to 30 cells, when there is room for one.
  const int room = budget - static_cast<int>(line.size()) - 3;  // "[" "]" and a space
  if (bar && room >= 10) {
    const int cells = std::min(room, 30);
    const int filled = static_cast<int>(cells * done / std::max<int64_t>(total, 1));
    line = "[" + std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(cells - filled), '.') +
           "] " + line;
  }
  if (static_cast<int>(line.size()) > budget) line.resize(static_cast<size_t>(std::max(budget, 0)));
  return line;
}

void Progress::update(const train::StepRecord& r) {
  const auto now = Clock::now();
  latest_ = r;
  losses_.push_back(r.loss);
  if (losses_.size() > kWindow) losses_.pop_front();
  if (ends_.empty()) first_step_seconds_ = r.seconds;
  ends_.push_back(now);
  if (ends_.size() > kWindow + 1) ends_.pop_front();
  const int64_t done = r.step - first_ + 1, total = last_ - first_ + 1;
  const bool final_step = r.step == last_;
  if (terminal_) {
    if (drawn_ && !final_step && now - last_draw_ < std::chrono::milliseconds(100)) return;
    const std::string line = status_line(columns_);
    // Pad to the previous draw's width so a shorter line leaves nothing behind.
    out_ << "\r" << line << std::string(static_cast<size_t>(std::max(0, columns_ - 1 - static_cast<int>(line.size()))), ' ')
         << std::flush;
    drawn_ = true;
    last_draw_ = now;
    return;
  }
  const int64_t every = std::max<int64_t>(1, total / 20);
  if (done != 1 && done % every != 0 && !final_step) return;
  out_ << status_line(1 << 20, false) << "\n" << std::flush;  // a log file: no width limit, no bar
}

void Progress::finish() {
  if (terminal_ && drawn_) out_ << "\n";
  drawn_ = false;
}

}  // namespace mixtrain::cli
