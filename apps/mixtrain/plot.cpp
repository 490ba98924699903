// mixtrain plot LOG.jsonl --out FILE.svg
#include "plot.h"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "common/cli.h"
#include "svg_chart.h"

namespace mixtrain::cli {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double number_or_nan(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return kNaN;
  if (!j[key].is_number()) throw std::runtime_error(where + ": \"" + key + "\" is not a number");
  return j[key].get<double>();
}

// The finite range of v (lo == hi widened), or [0, 1] when nothing is finite.
std::pair<double, double> range_of(const std::vector<double>& v, bool positive_only = false) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (double x : v)
    if (std::isfinite(x) && (!positive_only || x > 0)) {
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
  if (lo > hi) return {0, 1};
  if (lo == hi) {
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    return {lo - pad, hi + pad};
  }
  return {lo, hi};
}

// The mean of the finite values among the last `window` (a gap where there are none).
std::vector<double> running_mean(const std::vector<double>& v, size_t window) {
  std::vector<double> out(v.size(), kNaN);
  for (size_t i = 0; i < v.size(); ++i) {
    double sum = 0;
    size_t count = 0;
    for (size_t j = i + 1 > window ? i + 1 - window : 0; j <= i; ++j)
      if (std::isfinite(v[j])) {
        sum += v[j];
        ++count;
      }
    if (count) out[i] = sum / static_cast<double>(count);
  }
  return out;
}

}  // namespace

TrainLog read_train_log(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  TrainLog log;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(n);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error(where + ": not JSON (" + e.what() + ")");
    }
    if (!j.is_object()) throw std::runtime_error(where + ": not a JSON object");
    if (!j.contains("step") || !j["step"].is_number_integer())
      throw std::runtime_error(where + ": no integer \"step\"");
    if (!j.contains("loss")) throw std::runtime_error(where + ": no \"loss\"");
    log.step.push_back(j["step"].get<double>());
    log.loss.push_back(number_or_nan(j, "loss", where));
    log.scale.push_back(number_or_nan(j, "scale", where));
    log.lr.push_back(number_or_nan(j, "lr", where));
    log.has_scale = log.has_scale || std::isfinite(log.scale.back());
    log.has_lr = log.has_lr || std::isfinite(log.lr.back());
    if (j.contains("skipped") && j["skipped"].is_boolean() && j["skipped"].get<bool>()) log.skipped.push_back(log.step.back());
  }
  if (log.step.empty()) throw std::runtime_error(path + ": no steps in the log");
  return log;
}

std::string train_log_svg(const TrainLog& log, const std::string& title) {
  const double width = 820, left = 80, plot_w = 700, panel_h = 170, gap = 70, top = 60;
  const int panels = 1 + log.has_scale + log.has_lr;
  const double height = top + panels * (panel_h + gap);
  const auto [x_lo, x_hi] = range_of(log.step);
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" viewBox=\"0 0 " << width << " " << height << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n"
    << "<text x=\"10\" y=\"20\" font-size=\"14\">" << svg::escape(title) << "</text>\n";
  double y = top;
  // Loss: every step's (light) and the 20-step mean (dark); skipped steps as red ticks.
  {
    const auto [lo, hi] = range_of(log.loss);
    const double pad = (hi - lo) * 0.05;  // the curve off the frame
    const svg::Frame f{left, y, plot_w, panel_h, x_lo, x_hi, lo - pad, hi + pad};
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
    auto [lo, hi] = range_of(log.lr);
    lo = std::min(lo, 0.0);
    const svg::Frame f{left, y, plot_w, panel_h, x_lo, x_hi, lo, hi};
    svg::axes(s, f, "learning rate", "step");
    svg::line(s, f, log.step, log.lr, "#55a868", 1.5, "lr");
  }
  s << "</svg>\n";
  return s.str();
}

int run_plot(const std::vector<std::string>& argv) {
  namespace flags = examples::cli;
  std::string log_path, out_path;
  const auto app = flags::make_app("mixtrain plot", "Draws a training log (mixtrain train --log) as an SVG: the loss "
                                                    "with skipped steps marked, the loss scale and the learning rate.");
  app->add_option("log", log_path, "the JSONL log")->required()->type_name("LOG.jsonl");
  app->add_option("--out", out_path, "the SVG to write")->type_name("FILE.svg")->default_str("LOG.svg");
  if (!flags::parse(*app, argv, std::cout)) return 0;
  if (out_path.empty()) {
    const size_t dot = log_path.rfind('.');
    out_path = (dot == std::string::npos || log_path.find('/', dot) != std::string::npos ? log_path
                                                                                         : log_path.substr(0, dot)) +
               ".svg";
  }
  const TrainLog log = read_train_log(log_path);
  const std::string svg = train_log_svg(log, "training log " + log_path);
  // Written beside and renamed, so a failed write never leaves half a picture.
  const std::string tmp = out_path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!(out << svg) || !(out.flush())) throw std::runtime_error("--out: cannot write " + out_path);
  }
  if (std::rename(tmp.c_str(), out_path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error("--out: cannot write " + out_path);
  }
  std::cout << "wrote " << out_path << " (" << log.step.size() << " steps, " << log.skipped.size() << " skipped)\n";
  return 0;
}

}  // namespace mixtrain::cli
