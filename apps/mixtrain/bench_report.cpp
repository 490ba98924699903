#include "bench_report.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "svg_chart.h"

namespace mixtrain::cli {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
const char* const kPrecisions[] = {"fp32", "fp16", "bf16", "fp8"};
const char* const kColors[] = {"#4c72b0", "#dd8452", "#55a868", "#c44e52"};
// The dry run's prediction beside the measured peaks: absent or null where not computed.
const char* const kOptionalMemoryFields[] = {"predicted_peak_bytes", "plan_arena_bytes"};

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}

// A memory field in MiB, or "n/a" where it was not recorded (null) or, for the optional
// prediction fields, not computed (absent: a reference's rows, older documents).
std::string mib(const nlohmann::json& row, const char* key) {
  if (!row.contains(key)) return "n/a";
  const nlohmann::json& v = row.at(key);
  return v.is_null() ? "n/a" : fixed(v.get<double>() / kMiB, 1);
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

std::string xml_escape(const std::string& s) { return svg::escape(s); }

// Indices into kPrecisions of the precisions either document has rows for, in that order.
std::vector<int> precisions_of(const nlohmann::json& doc, const nlohmann::json* ref) {
  std::vector<int> out;
  for (int p = 0; p < static_cast<int>(sizeof(kPrecisions) / sizeof(kPrecisions[0])); ++p) {
    bool any = false;
    for (const nlohmann::json* d : {&doc, ref})
      if (d)
        for (const auto& r : d->at("results")) any = any || r.at("precision") == kPrecisions[p];
    if (any) out.push_back(p);
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
                            "peak_allocated_bytes", "peak_reserved_bytes", "final_loss", "skipped_steps"}) {
      // Memory a framework does not record (PyTorch on the CPU) is null.
      const bool may_be_null = std::string(key).rfind("peak_", 0) == 0;
      if (!r.contains(key) || !(r[key].is_number() || (may_be_null && r[key].is_null()))) fail(at + key);
    }
    for (const char* key : kOptionalMemoryFields)
      if (r.contains(key) && !(r[key].is_number() || r[key].is_null())) fail(at + key);
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
      << "speedup" << std::setw(11) << "alloc MiB" << std::setw(11) << "resv MiB" << std::setw(11) << "pred MiB"
      << std::setw(11) << "arena MiB" << std::setw(10) << "loss";
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
        << mib(r, "peak_allocated_bytes") << std::setw(11) << mib(r, "peak_reserved_bytes") << std::setw(11)
        << mib(r, "predicted_peak_bytes") << std::setw(11) << mib(r, "plan_arena_bytes") << std::setw(10)
        << fixed(r.at("final_loss").get<double>(), 4);
    if (ref) {
      const nlohmann::json* t = find_result(*ref, r.at("model"), r.at("precision"));
      out << "  |";
      if (t)
        out << std::setw(11) << fixed(t->at("median_step_ms").get<double>(), 2) << std::setw(8)
            << fixed(t->at("speedup_vs_fp32").get<double>(), 2) << "x" << std::setw(11)
            << mib(*t, "peak_allocated_bytes") << std::setw(11) << mib(*t, "peak_reserved_bytes");
      else
        out << std::setw(11) << "-";
    }
    out << "\n";
  }
}

std::string bench_svg(const nlohmann::json& doc, const nlohmann::json* ref) {
  const std::vector<std::string> models = models_of(doc);
  const std::vector<int> precs = precisions_of(doc, ref);
  const int np = static_cast<int>(precs.size());
  const int series = ref ? 2 * np : np;  // ours fp32/fp16/bf16(/fp8), then the reference's
  const double bar = 16, gap = 26, axis_w = 60, plot_h = 220, top = 70;
  const double group_w = series * bar + gap;
  const double panel_w = std::max(300.0, axis_w + 20 + group_w * static_cast<double>(models.size()));
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
  for (int p = 0; p < np; ++p)
    s << "<rect x=\"" << 10 + p * 70 << "\" y=\"28\" width=\"10\" height=\"10\" fill=\"" << kColors[precs[p]]
      << "\"/><text x=\"" << 24 + p * 70 << "\" y=\"37\">" << kPrecisions[precs[p]] << "</text>\n";

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
    const double x0 = pi * (panel_w + 20) + axis_w, base = top + plot_h;
    // Every model's bars on one log scale: models differ by orders of magnitude, and an outlier
    // no longer flattens the others. NaN: no such row; -1: the row has no value (n/a).
    std::vector<std::vector<double>> values(models.size(), std::vector<double>(static_cast<size_t>(series), NAN));
    double lo = INFINITY, hi = -INFINITY;
    for (size_t mi = 0; mi < models.size(); ++mi)
      for (int k = 0; k < series; ++k) {
        const nlohmann::json* r = find_result(k < np ? doc : *ref, models[mi], kPrecisions[precs[k % np]]);
        if (!r) continue;
        const nlohmann::json& v = r->at(panel.key);
        const double x = v.is_null() ? -1 : v.get<double>() / panel.divisor;
        values[mi][static_cast<size_t>(k)] = x;
        if (x > 0) lo = std::min(lo, x), hi = std::max(hi, x);
      }
    if (!(lo <= hi)) lo = 1, hi = 10;
    const double d_lo = std::floor(std::log10(lo)), d_hi = std::max(d_lo + 1, std::ceil(std::log10(hi)));
    auto y_of = [&](double v) { return base - plot_h * (std::log10(v) - d_lo) / (d_hi - d_lo); };
    s << "<text x=\"" << x0 << "\" y=\"" << top - 14 << "\" font-size=\"13\">" << panel.title << " (" << panel.unit
      << ", log scale)</text>\n"
      << "<g class=\"axes\" stroke=\"#333\"><line x1=\"" << x0 << "\" y1=\"" << base << "\" x2=\""
      << x0 + group_w * static_cast<double>(models.size()) << "\" y2=\"" << base << "\"/><line x1=\"" << x0 << "\" y1=\""
      << top << "\" x2=\"" << x0 << "\" y2=\"" << base << "\"/></g>\n";
    // Ticks at 1, 2 and 5 times each power of ten (only the powers when there are many decades).
    for (double d = d_lo; d <= d_hi; ++d)
      for (double m : {1.0, 2.0, 5.0}) {
        if ((m != 1.0 && d_hi - d_lo > 3) || d + std::log10(m) > d_hi + 1e-9) continue;
        const double v = m * std::pow(10.0, d), y = y_of(v);
        s << "<line x1=\"" << x0 << "\" y1=\"" << y << "\" x2=\"" << x0 + group_w * static_cast<double>(models.size())
          << "\" y2=\"" << y << "\" stroke=\"" << (m == 1.0 ? "#ccc" : "#eee") << "\"/><text class=\"tick\" x=\""
          << x0 - 5 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">" << svg::label(v) << "</text>\n";
      }
    for (size_t mi = 0; mi < models.size(); ++mi) {
      const double gx = x0 + 10 + group_w * static_cast<double>(mi);
      for (int k = 0; k < series; ++k) {
        const double v = values[mi][static_cast<size_t>(k)], x = gx + k * bar;
        if (std::isnan(v)) continue;
        const std::string name = xml_escape(models[mi]) + " " + kPrecisions[precs[k % np]] +
                                 (k >= np ? " " + xml_escape(theirs) : std::string());
        if (v <= 0) {  // not recorded, or nothing to draw on a log scale
          const double tx = x + bar / 2 + 3, ty = base - 4;
          s << "<text class=\"na\" x=\"" << tx << "\" y=\"" << ty << "\" font-size=\"9\" fill=\"#888\" transform=\"rotate(-90 "
            << tx << " " << ty << ")\"><title>" << name << ": not recorded</title>" << (v < 0 ? "n/a" : "0")
            << "</text>\n";
          continue;
        }
        const double h = std::max(1.0, base - y_of(v));
        s << "<rect class=\"bar\" x=\"" << x << "\" y=\"" << base - h << "\" width=\"" << bar - 2 << "\" height=\"" << h
          << "\" fill=\"" << kColors[precs[k % np]] << "\"><title>" << name << ": " << fixed(v, 2) << " " << panel.unit
          << "</title></rect>\n";
        if (k >= np)
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
