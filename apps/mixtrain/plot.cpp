// The training log behind `mixtrain plot`: read strictly and drawn as an SVG.
#include "plot.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include <mixtrain/base/error.h>
#include <mixtrain/core/file_reader.h>

#include "svg_chart.h"

namespace mixtrain::cli {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double number_or_nan(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return kNaN;
  MT_CHECK(j[key].is_number(), where, ": \"", key, "\" is not a number");
  return j[key].get<double>();
}

// The finite range of v, [0, 1] when nothing is finite (positive_only: of the positive values).
std::pair<double, double> range_of(const std::vector<double>& v, bool positive_only = false) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (double x : v)
    if (std::isfinite(x) && (!positive_only || x > 0)) {
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
  return lo > hi ? std::pair<double, double>{0, 1} : std::pair<double, double>{lo, hi};
}

// The mean of the finite values among the last `window` (a gap where there are none). Each value
// is divided before the sum, so losses near the largest double do not overflow it.
std::vector<double> running_mean(const std::vector<double>& v, size_t window) {
  std::vector<double> out(v.size(), kNaN);
  for (size_t i = 0; i < v.size(); ++i) {
    const size_t from = i + 1 > window ? i + 1 - window : 0;
    size_t count = 0;
    for (size_t j = from; j <= i; ++j) count += std::isfinite(v[j]);
    if (count == 0) continue;
    double mean = 0;
    for (size_t j = from; j <= i; ++j)
      if (std::isfinite(v[j])) mean += v[j] / static_cast<double>(count);
    out[i] = mean;
  }
  return out;
}

}  // namespace

void add_train_log_line(TrainLog& log, const std::string& line, const std::string& where) {
  if (line.find_first_not_of(" \t\r") == std::string::npos) return;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    MT_ERROR(where, ": not JSON (", e.what(), ")");
  }
  MT_CHECK(j.is_object(), where, ": not a JSON object");
  MT_CHECK(j.contains("step") && j["step"].is_number_integer(), where, ": no integer \"step\"");
  MT_CHECK(j.contains("loss"), where, ": no \"loss\"");
  const double step = j["step"].get<double>(), loss = number_or_nan(j, "loss", where);
  const double scale = number_or_nan(j, "scale", where), lr = number_or_nan(j, "lr", where);
  // A loss scale is positive: anything else has no place on its log2 axis.
  MT_CHECK(std::isnan(scale) || (scale > 0 && std::isfinite(scale)), where, ": \"scale\" is ", scale,
           ", not a finite value > 0");
  log.step.push_back(step);
  log.loss.push_back(loss);
  log.scale.push_back(scale);
  log.lr.push_back(lr);
  log.has_scale = log.has_scale || std::isfinite(scale);
  log.has_lr = log.has_lr || std::isfinite(lr);
  if (j.contains("skipped") && j["skipped"].is_boolean() && j["skipped"].get<bool>()) log.skipped.push_back(step);
}

TrainLog read_train_log(const std::string& path) {
  LineReader in(path, "mixtrain plot");
  TrainLog log;
  for (std::string line; in.next(line);) add_train_log_line(log, line, path + ":" + std::to_string(in.line_number()));
  MT_CHECK(!log.step.empty(), path, ": no steps in the log");
  return log;
}

std::string train_log_svg(const TrainLog& log, const std::string& title) {
  const double width = 820, left = 80, plot_w = 700, panel_h = 170, gap = 70, top = 60;
  const int panels = 1 + log.has_scale + log.has_lr;
  const double height = top + panels * (panel_h + gap);
  const auto [step_lo, step_hi] = range_of(log.step);
  const auto [x_lo, x_hi] = svg::padded(step_lo, step_hi, 0);
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" viewBox=\"0 0 " << width << " " << height << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n"
    << "<text x=\"10\" y=\"20\" font-size=\"14\">" << svg::escape(title) << "</text>\n";
  double y = top;
  // Loss: every step's (light) and the 20-step mean (dark); skipped steps as red ticks.
  {
    const auto [data_lo, data_hi] = range_of(log.loss);
    const auto [lo, hi] = svg::padded(data_lo, data_hi, 0.05);  // the curve off the frame
    const svg::Frame f{left, y, plot_w, panel_h, x_lo, x_hi, lo, hi};
    svg::axes(s, f, "training loss (light: each step; dark: mean of the last 20)", "step");
    svg::line(s, f, log.step, log.loss, "#9ab3d5", 1, "loss");
    svg::line(s, f, log.step, running_mean(log.loss, 20), "#1f4e8c", 1.8, "loss-mean");
    for (double st : log.skipped)
      s << "<line class=\"skipped\" x1=\"" << f.px(st) << "\" y1=\"" << y + panel_h - 10 << "\" x2=\"" << f.px(st)
        << "\" y2=\"" << y + panel_h << "\" stroke=\"#c44e52\" stroke-width=\"2\"><title>step " << svg::label(st)
        << " skipped</title></line>\n";
    s << "<text x=\"" << left + plot_w << "\" y=\"" << y - 8 << "\" text-anchor=\"end\" fill=\"#c44e52\">"
      << log.skipped.size() << " skipped step" << (log.skipped.size() == 1 ? "" : "s") << " (red ticks)</text>\n";
    y += panel_h + gap;
  }
  if (log.has_scale) {
    // Positive finite scales only (the reader refuses others): their log2 lies in [-1074, 1024].
    auto [lo, hi] = range_of(log.scale, true);
    lo = std::floor(std::log2(lo));
    hi = std::ceil(std::log2(hi));
    if (lo == hi) hi = lo + 1;
    svg::Frame f{left, y, plot_w, panel_h, x_lo, x_hi, lo, hi};
    f.log2_y = true;
    svg::axes(s, f, "loss scale (log scale)", "step");
    svg::line(s, f, log.step, log.scale, "#dd8452", 1.5, "scale", /*hold=*/true);
    y += panel_h + gap;
  }
  if (log.has_lr) {
    const auto [data_lo, data_hi] = range_of(log.lr);
    const auto [lo, hi] = svg::padded(std::min(data_lo, 0.0), data_hi, 0);
    const svg::Frame f{left, y, plot_w, panel_h, x_lo, x_hi, lo, hi};
    svg::axes(s, f, "learning rate", "step");
    svg::line(s, f, log.step, log.lr, "#55a868", 1.5, "lr");
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace mixtrain::cli
