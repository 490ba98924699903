#pragma once
// Small SVG drawing helpers the tool's charts share: text escaping, axis ticks at round values,
// and a line panel with axes.
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace mixtrain::cli::svg {

std::string escape(const std::string& s);
// A number as a tick label: few digits, no trailing zeros ("0.001", "2.5", "1e+05").
std::string label(double v);

// About `count` round values (1, 2 or 5 times a power of ten) covering [lo, hi]; just lo and hi
// where round values cannot be counted exactly (a range a few ulps wide), none for a range that is
// not finite. Never more than 4 * count + 5.
std::vector<double> ticks(double lo, double hi, int count = 5);
// [lo - pad * (hi - lo), hi + pad * (hi - lo)] (lo == hi: a tenth of |lo| either side, or 1 at 0),
// clamped to the finite doubles; [0, 1] for a range that is not finite or empty.
std::pair<double, double> padded(double lo, double hi, double pad);

// A rectangle on the page and the data range mapped onto it; y grows upwards. With log2_y the
// y range is in log2 units and the ticks are powers of two. Any finite range maps without
// overflow (px and py are finite for finite values).
struct Frame {
  double x, y, w, h;               // page coordinates of the plotting area
  double x_lo, x_hi, y_lo, y_hi;   // data range
  bool log2_y = false;
  double px(double v) const;
  double py(double v) const;       // v in data units (not log2)
};

// Axes, ticks, tick labels and grid lines for `f`, with a title above and an x label below.
void axes(std::ostringstream& out, const Frame& f, const std::string& title, const std::string& x_label);
// A polyline through the finite points (a gap where a value is not finite); with `hold`, a step
// line that keeps each value until the next point (for a value that changes in jumps).
void line(std::ostringstream& out, const Frame& f, const std::vector<double>& xs, const std::vector<double>& ys,
          const std::string& color, double width, const std::string& css_class, bool hold = false);

}  // namespace mixtrain::cli::svg
