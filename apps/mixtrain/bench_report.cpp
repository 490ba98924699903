#include "bench_report.h"

#include <algorithm>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace mixtrain::cli {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
const char* const kPrecisions[] = {"fp32", "fp16", "bf16"};
const char* const kColors[] = {"#4c72b0", "#dd8452", "#55a868"};

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}

// Models in first-seen order.
std::vector<std::string> models_of(const nlohmann::json& doc) {
  std::vector<std::string> out;
  for (const auto& r : doc.at("results")) {
    const std::string m = r.at("model").get<std::string>();
    if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
  }
  return out;
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

}  // namespace

void check_bench_json(const nlohmann::json& doc, const std::string& what) {
  auto fail = [&](const std::string& field) {
    throw std::runtime_error(what + ": missing or mistyped field \"" + field + "\" (expected a bench.json document)");
  };
  if (!doc.is_object()) fail("(top level object)");
  if (!doc.contains("framework") || !doc["framework"].is_string()) fail("framework");
  if (!doc.contains("results") || !doc["results"].is_array()) fail("results");
  size_t i = 0;
  for (const auto& r : doc["results"]) {
    const std::string at = "results[" + std::to_string(i++) + "].";
    if (!r.is_object()) fail(at.substr(0, at.size() - 1));
    for (const char* key : {"model", "precision"})
      if (!r.contains(key) || !r[key].is_string()) fail(at + key);
    for (const char* key : {"parameters", "batch_size", "median_step_ms", "samples_per_s", "speedup_vs_fp32",
                            "peak_allocated_bytes", "peak_reserved_bytes", "final_loss", "skipped_steps"})
      if (!r.contains(key) || !r[key].is_number()) fail(at + key);
  }
}

const nlohmann::json* find_result(const nlohmann::json& doc, const std::string& model, const std::string& precision) {
  for (const auto& r : doc.at("results"))
    if (r.at("model") == model && r.at("precision") == precision) return &r;
  return nullptr;
}

void print_bench_table(std::ostream& out, const nlohmann::json& doc, const nlohmann::json* ref) {
  const std::string ref_name = ref ? ref->value("framework", std::string("reference")) : "";
  auto math = [](const nlohmann::json& d) { return d.value("fp32_math", std::string("default")); };
  // TF32 exists only on the GPU: a CPU run names its fp32 only when asked for strict or when the
  // reference's differs.
  const bool on_gpu = doc.value("device", std::string("cpu")) != "cpu";
  if (on_gpu || math(doc) == "strict" || (ref && math(*ref) != math(doc))) {
    out << "fp32 baseline: " << (math(doc) == "strict" ? "strict fp32 (no TF32)" : "cuDNN convolutions on TF32 (PyTorch's default)");
    if (ref && math(*ref) != math(doc)) out << "; the reference's is " << math(*ref) << " (not comparable)";
    out << "\n";
  }
  out << std::left << std::setw(12) << "model" << std::setw(6) << "prec" << std::right << std::setw(11) << "params"
      << std::setw(7) << "batch" << std::setw(11) << "step ms" << std::setw(11) << "samples/s" << std::setw(9)
      << "speedup" << std::setw(11) << "alloc MiB" << std::setw(11) << "resv MiB" << std::setw(10) << "loss";
  if (ref)
    out << "  |" << std::setw(11) << (ref_name + " ms").substr(0, 10) << std::setw(9) << "speedup" << std::setw(11)
        << "alloc MiB" << std::setw(11) << "resv MiB";
  out << "\n";
  for (const auto& r : doc.at("results")) {
    out << std::left << std::setw(12) << r.at("model").get<std::string>() << std::setw(6)
        << r.at("precision").get<std::string>() << std::right << std::setw(11) << r.at("parameters").get<int64_t>()
        << std::setw(7) << r.at("batch_size").get<int64_t>() << std::setw(11)
        << fixed(r.at("median_step_ms").get<double>(), 2) << std::setw(11) << fixed(r.at("samples_per_s").get<double>(), 1)
        << std::setw(8) << fixed(r.at("speedup_vs_fp32").get<double>(), 2) << "x" << std::setw(11)
        << fixed(r.at("peak_allocated_bytes").get<double>() / kMiB, 1) << std::setw(11)
        << fixed(r.at("peak_reserved_bytes").get<double>() / kMiB, 1) << std::setw(10)
        << fixed(r.at("final_loss").get<double>(), 4);
    if (ref) {
      const nlohmann::json* t = find_result(*ref, r.at("model"), r.at("precision"));
      out << "  |";
      if (t)
        out << std::setw(11) << fixed(t->at("median_step_ms").get<double>(), 2) << std::setw(8)
            << fixed(t->at("speedup_vs_fp32").get<double>(), 2) << "x" << std::setw(11)
            << fixed(t->at("peak_allocated_bytes").get<double>() / kMiB, 1) << std::setw(11)
            << fixed(t->at("peak_reserved_bytes").get<double>() / kMiB, 1);
      else
        out << std::setw(11) << "-";
    }
    out << "\n";
  }
}

std::string bench_svg(const nlohmann::json& doc, const nlohmann::json* ref) {
  const std::vector<std::string> models = models_of(doc);
  const int series = ref ? 6 : 3;  // ours fp32/fp16/bf16, then the reference's
  const double bar = 16, gap = 26, panel_pad = 40, plot_h = 220, top = 70;
  const double group_w = series * bar + gap;
  const double panel_w = std::max(300.0, panel_pad * 2 + group_w * static_cast<double>(models.size()));
  const double width = panel_w * 2 + 20, height = top + plot_h + 30;
  const std::string ours = doc.value("framework", std::string("mixtrain"));
  const std::string theirs = ref ? ref->value("framework", std::string("reference")) : "";

  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height << "\" viewBox=\"0 0 "
    << width << " " << height << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
    << "<defs><pattern id=\"hatch\" width=\"4\" height=\"4\" patternUnits=\"userSpaceOnUse\">"
    << "<path d=\"M0,4 L4,0\" stroke=\"#fff\" stroke-width=\"1\"/></pattern></defs>\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n"
    << "<text x=\"10\" y=\"18\" font-size=\"14\">" << xml_escape(ours) << " AMP benchmark: "
    << xml_escape(doc.value("device", std::string("?"))) << ", size " << xml_escape(doc.value("size", std::string("?")))
    << (ref ? " (hatched: " + xml_escape(theirs) + ")" : std::string()) << "</text>\n";
  for (int p = 0; p < 3; ++p)
    s << "<rect x=\"" << 10 + p * 70 << "\" y=\"28\" width=\"10\" height=\"10\" fill=\"" << kColors[p]
      << "\"/><text x=\"" << 24 + p * 70 << "\" y=\"37\">" << kPrecisions[p] << "</text>\n";

  struct Panel {
    const char* title;
    const char* key;
    double divisor;
    const char* unit;
  };
  const Panel panels[] = {{"median step time", "median_step_ms", 1.0, "ms"},
                          {"peak allocated memory", "peak_allocated_bytes", kMiB, "MiB"}};
  for (int pi = 0; pi < 2; ++pi) {
    const Panel& panel = panels[pi];
    const double x0 = pi * (panel_w + 20) + panel_pad, base = top + plot_h;
    s << "<text x=\"" << x0 << "\" y=\"" << top - 14 << "\" font-size=\"13\">" << panel.title << " (" << panel.unit
      << ")</text>\n"
      << "<line x1=\"" << x0 - 5 << "\" y1=\"" << base << "\" x2=\"" << x0 + group_w * models.size() << "\" y2=\"" << base
      << "\" stroke=\"#333\"/>\n";
    for (size_t mi = 0; mi < models.size(); ++mi) {
      std::vector<double> values(static_cast<size_t>(series), -1);
      for (int k = 0; k < series; ++k) {
        const nlohmann::json* src = k < 3 ? &doc : ref;
        const nlohmann::json* r = find_result(*src, models[mi], kPrecisions[k % 3]);
        if (r) values[static_cast<size_t>(k)] = r->at(panel.key).get<double>() / panel.divisor;
      }
      const double vmax = std::max(*std::max_element(values.begin(), values.end()), 1e-12);
      const double gx = x0 + group_w * static_cast<double>(mi);
      for (int k = 0; k < series; ++k) {
        const double v = values[static_cast<size_t>(k)];
        if (v < 0) continue;
        const double h = plot_h * 0.85 * v / vmax, x = gx + k * bar;
        s << "<rect class=\"bar\" x=\"" << x << "\" y=\"" << base - h << "\" width=\"" << bar - 2 << "\" height=\"" << h
          << "\" fill=\"" << kColors[k % 3] << "\"><title>" << xml_escape(models[mi]) << " " << kPrecisions[k % 3]
          << (k >= 3 ? " " + xml_escape(theirs) : std::string()) << ": " << fixed(v, 2) << " " << panel.unit
          << "</title></rect>\n";
        if (k >= 3)
          s << "<rect x=\"" << x << "\" y=\"" << base - h << "\" width=\"" << bar - 2 << "\" height=\"" << h
            << "\" fill=\"url(#hatch)\"/>\n";
        const double tx = x + bar / 2 - 1, ty = base - h - 4;
        s << "<text x=\"" << tx << "\" y=\"" << ty << "\" font-size=\"9\" transform=\"rotate(-60 " << tx << " " << ty
          << ")\">" << fixed(v, v < 10 ? 2 : 1) << "</text>\n";
      }
      s << "<text x=\"" << gx + series * bar / 2 << "\" y=\"" << base + 16 << "\" text-anchor=\"middle\">"
        << xml_escape(models[mi]) << "</text>\n";
    }
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace mixtrain::cli
