#include "svg_chart.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>

namespace mixtrain::cli::svg {

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string label(double v) {
  if (v == 0) return "0";
  std::ostringstream os;
  // Whole numbers up to a billion in full (a loss scale of 65536 reads better than 6.554e+04).
  if (std::abs(v) >= 1 && std::abs(v) < 1e9 && v == std::round(v)) os << std::fixed << std::setprecision(0) << v;
  else os << std::setprecision(4) << v;
  return os.str();
}

namespace {
constexpr double kMax = std::numeric_limits<double>::max();

// Where v lies in [lo, hi] as a fraction, computed on halves so that a range as wide as the
// doubles themselves (-1e308 to 1e308) does not overflow to inf and give NaN.
double fraction(double v, double lo, double hi) {
  const double span = hi / 2 - lo / 2;
  return span > 0 ? (v / 2 - lo / 2) / span : 0.5;
}
}  // namespace

std::pair<double, double> padded(double lo, double hi, double pad) {
  if (!std::isfinite(lo) || !std::isfinite(hi) || lo > hi) return {0, 1};
  if (lo == hi) {  // one value: a tenth of it either side, so it has a range to sit in
    const double d = lo == 0 ? 1 : std::abs(lo) * 0.1;
    return {std::max(lo - d, -kMax), std::min(hi + d, kMax)};
  }
  const double d = (hi / 2 - lo / 2) * 2 * pad;  // (hi - lo) * pad without overflowing
  return {std::max(lo - d, -kMax), std::min(hi + d, kMax)};
}

std::vector<double> ticks(double lo, double hi, int count) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {};
  if (!(hi > lo)) return {lo};
  const double raw = (hi / 2 - lo / 2) / std::max(count, 1) * 2;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  // Whole multiples of the step, so no error accumulates along the axis. Where the multiples
  // cannot be counted exactly (a range a few ulps wide at 2^60: k + 1 == k), or the step is not
  // finite, the ends alone are the ticks: the loop below must always advance.
  const double first = std::ceil(lo / step - 1e-9), last = std::floor(hi / step + 1e-9);
  if (!std::isfinite(step) || !(step > 0) || !std::isfinite(first) || !std::isfinite(last) ||
      std::abs(first) >= 0x1p52 || std::abs(last) >= 0x1p52 || last - first > 4.0 * count + 4)
    return {lo, hi};
  std::vector<double> out;
  for (double k = first; k <= last; k += 1) out.push_back(k * step);
  return out;
}

double Frame::px(double v) const { return x + fraction(v, x_lo, x_hi) * w; }

double Frame::py(double v) const { return y + h - fraction(log2_y ? std::log2(v) : v, y_lo, y_hi) * h; }

void axes(std::ostringstream& out, const Frame& f, const std::string& title, const std::string& x_label) {
  out << "<text x=\"" << f.x << "\" y=\"" << f.y - 8 << "\" font-size=\"13\">" << escape(title) << "</text>\n";
  out << "<g class=\"axes\" stroke=\"#333\" fill=\"none\">"
      << "<line x1=\"" << f.x << "\" y1=\"" << f.y + f.h << "\" x2=\"" << f.x + f.w << "\" y2=\"" << f.y + f.h << "\"/>"
      << "<line x1=\"" << f.x << "\" y1=\"" << f.y << "\" x2=\"" << f.x << "\" y2=\"" << f.y + f.h << "\"/></g>\n";
  for (double t : ticks(f.x_lo, f.x_hi, 6)) {
    const double px = f.px(t);
    out << "<line x1=\"" << px << "\" y1=\"" << f.y + f.h << "\" x2=\"" << px << "\" y2=\"" << f.y + f.h + 4
        << "\" stroke=\"#333\"/><text class=\"tick\" x=\"" << px << "\" y=\"" << f.y + f.h + 16
        << "\" text-anchor=\"middle\">" << label(t) << "</text>\n";
  }
  std::vector<double> ys;
  if (f.log2_y) {
    // Exponents of two: the range is at most about 2100 wide (subnormals to the largest double).
    const double lo = std::ceil(f.y_lo - 1e-9), hi = std::floor(f.y_hi + 1e-9);
    const double every = std::max(1.0, std::ceil((hi - lo + 1) / 6));
    if (std::isfinite(lo) && std::isfinite(hi))
      for (double e = lo; e <= hi; e += every) ys.push_back(std::exp2(e));
  } else {
    ys = ticks(f.y_lo, f.y_hi, 5);
  }
  for (double t : ys) {
    const double py = f.py(t);
    out << "<line x1=\"" << f.x << "\" y1=\"" << py << "\" x2=\"" << f.x + f.w << "\" y2=\"" << py
        << "\" stroke=\"#ddd\"/><text class=\"tick\" x=\"" << f.x - 6 << "\" y=\"" << py + 4
        << "\" text-anchor=\"end\">" << label(t) << "</text>\n";
  }
  out << "<text x=\"" << f.x + f.w / 2 << "\" y=\"" << f.y + f.h + 32 << "\" text-anchor=\"middle\">"
      << escape(x_label) << "</text>\n";
}

void line(std::ostringstream& out, const Frame& f, const std::vector<double>& xs, const std::vector<double>& ys,
          const std::string& color, double width, const std::string& css_class, bool hold) {
  std::string points;
  auto flush = [&] {
    if (!points.empty())
      out << "<polyline class=\"" << css_class << "\" fill=\"none\" stroke=\"" << color << "\" stroke-width=\"" << width
          << "\" points=\"" << points << "\"/>\n";
    points.clear();
  };
  for (size_t i = 0; i < xs.size() && i < ys.size(); ++i) {
    const double px = f.px(xs[i]), py = f.py(ys[i]);
    // No coordinate that is not a number reaches the SVG: a gap instead.
    if (!std::isfinite(ys[i]) || (f.log2_y && ys[i] <= 0) || !std::isfinite(px) || !std::isfinite(py)) {
      flush();
      continue;
    }
    std::ostringstream p;
    p << std::fixed << std::setprecision(1);
    if (hold && !points.empty()) p << px << "," << f.py(ys[i - 1]) << " ";
    p << px << "," << py << " ";
    points += p.str();
  }
  flush();
}

}  // namespace mixtrain::cli::svg
