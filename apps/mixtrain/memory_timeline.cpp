// Draws a step's memory trace as SVG (memory_timeline.h).
#include "memory_timeline.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "common/cli.h"
#include "svg_chart.h"

namespace mixtrain::cli {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr const char* kRoleColors[memory::kNumRoles] = {"#4c72b0", "#dd8452", "#55a868", "#8172b3", "#c44e52",
                                                        "#937860", "#da8bc3", "#8c8c8c", "#ccb974", "#64b5cd"};
constexpr int kLabelled = 5;  // the biggest in-step buffers named on the live-bytes line

void legend(std::ostringstream& s, double x, double y) {
  for (int r = 0; r < memory::kNumRoles; ++r) {  // two rows of five
    const double at = x + (r % 5) * 150, row_y = y - 8 + (r / 5) * 14;
    s << "<rect x=\"" << at << "\" y=\"" << row_y - 9 << "\" width=\"10\" height=\"10\" fill=\"" << kRoleColors[r]
      << "\"/><text x=\"" << at + 14 << "\" y=\"" << row_y << "\">" << memory::role_name(static_cast<memory::Role>(r))
      << "</text>\n";
  }
}

// A label's box: 11 px sans-serif is about 6.2 px a character, plus a margin.
constexpr double kCharWidth = 6.2, kLabelHeight = 13, kLabelPad = 3;
double label_width(const std::string& text) { return static_cast<double>(text.size()) * kCharWidth + 2 * kLabelPad; }

// Dashed lines where the phase changes, and each phase's name in a box at the top of the panel:
// over its stretch when it fits there, else from its start, kept inside the panel, on the next
// row down when it would cover the previous label.
void phase_marks(std::ostringstream& s, const svg::Frame& f, const std::vector<PhaseSegment>& segments) {
  std::vector<double> row_ends;  // right edge of the last box on each row
  for (const PhaseSegment& seg : segments) {
    const double x0 = f.px(static_cast<double>(seg.begin)), x1 = f.px(static_cast<double>(seg.end));
    s << "<line class=\"phase\" x1=\"" << x0 << "\" y1=\"" << f.y << "\" x2=\"" << x0 << "\" y2=\"" << f.y + f.h
      << "\" stroke=\"#555\" stroke-dasharray=\"4 3\"/>\n";
    const double w = label_width(seg.label);
    double bx = x1 - x0 >= w ? (x0 + x1 - w) / 2 : x0 + 2;
    bx = std::clamp(bx, f.x + 1, f.x + f.w - w - 1);
    int row = 0;
    while (row < static_cast<int>(row_ends.size()) && row_ends[static_cast<size_t>(row)] > bx - 2) ++row;
    if (row == static_cast<int>(row_ends.size())) row_ends.push_back(0);
    row_ends[static_cast<size_t>(row)] = bx + w;
    const double by = f.y + 3 + row * (kLabelHeight + 2);
    s << "<rect class=\"phase-label-box\" x=\"" << bx << "\" y=\"" << by << "\" width=\"" << w << "\" height=\""
      << kLabelHeight << "\" fill=\"#fff\" fill-opacity=\"0.85\" stroke=\"#999\" stroke-width=\"0.5\"/>"
      << "<text class=\"phase-label\" x=\"" << bx + kLabelPad << "\" y=\"" << by + kLabelHeight - 3
      << "\" fill=\"#333\">" << seg.label << "</text>\n";
  }
}

}  // namespace

std::vector<PhaseSegment> phase_segments(const std::vector<memory::MemoryEvent>& events, size_t first) {
  struct Raw {
    size_t begin, end;
    memory::Phase phase;
    bool frees_only;
  };
  std::vector<Raw> raw;
  for (size_t i = first; i < events.size(); ++i) {
    const bool free = events[i].kind == memory::MemoryEvent::Kind::Free;
    if (i > first && events[i - 1].phase == events[i].phase) {
      raw.back().end = i - first + 1;
      raw.back().frees_only = raw.back().frees_only && free;
    } else {
      raw.push_back({i - first, i - first + 1, events[i].phase, free});
    }
  }
  std::vector<PhaseSegment> out;
  bool computed = false;  // a forward or backward stretch seen
  for (const Raw& r : raw) {
    // A stretch that only frees (the loss and its friends released as the step's scope ends) ran
    // nothing of its own: it belongs to the stretch before it.
    if (r.frees_only && !out.empty()) {
      out.back().end = r.end;
      continue;
    }
    // Optimizer work before anything is computed is the step's zero_grad (the gradients of the
    // last step freed), not its update.
    std::string label = r.phase == memory::Phase::Optimizer && !computed ? "zero_grad" : memory::phase_name(r.phase);
    computed = computed || r.phase != memory::Phase::Optimizer;
    if (!out.empty() && out.back().label == label) {
      out.back().end = r.end;
      continue;
    }
    out.push_back({r.begin, r.end, std::move(label)});
  }
  return out;
}

std::string timeline_svg(const memory::MemoryTrace& trace, const ArenaLayout& arena, const std::string& title) {
  const std::vector<memory::MemoryEvent>& events = trace.events;
  const double width = 980, left = 80, plot_w = 860, panel_h = 260, gap = 140, top = 70;
  // Below the last panel: its tick labels and axis title (svg::axes puts the title 32 px down).
  // The x axis starts at the step's first event; buffers alive before it are the line's base.
  size_t first = 0;
  while (first < events.size() && events[first].before_step) ++first;
  const double bottom = 44;
  const double height = top + panel_h + gap + 10 + panel_h + bottom;
  std::vector<double> xs, ys, live;
  int64_t now = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    now += (events[i].kind == memory::MemoryEvent::Kind::Alloc ? 1 : -1) * static_cast<int64_t>(events[i].bytes);
    live.push_back(static_cast<double>(now) / kMiB);
    if (i + 1 < first) continue;
    xs.push_back(i < first ? 0.0 : static_cast<double>(i - first));
    ys.push_back(live.back());
  }
  const double x_hi = std::max<double>(1, static_cast<double>(events.size() - first) - 1);
  std::ostringstream s;
  s << std::fixed << std::setprecision(1);
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height << "\" viewBox=\"0 0 "
    << width << " " << height << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n"
    << "<text x=\"10\" y=\"20\" font-size=\"14\">" << svg::escape(title) << "</text>\n";
  legend(s, left, 44);

  // Live bytes, event by event; the peak and the biggest in-step buffers marked.
  double y = top;
  {
    const double peak = static_cast<double>(trace.peak_bytes()) / kMiB;
    const svg::Frame f{left, y + 10, plot_w, panel_h, 0, x_hi, 0, std::max(peak * 1.12, 1e-6)};
    svg::axes(s, f, "live bytes (MiB) through the step: peak " + memory::format_bytes(trace.peak_bytes()),
              "event of the step (the biggest buffers numbered)");
    phase_marks(s, f, phase_segments(events, first));
    svg::line(s, f, xs, ys, "#1f4e8c", 1.5, "live", /*hold=*/true);
    std::vector<size_t> allocs;
    for (size_t i = 0; i < events.size(); ++i)
      if (events[i].kind == memory::MemoryEvent::Kind::Alloc && !events[i].before_step) allocs.push_back(i);
    std::stable_sort(allocs.begin(), allocs.end(), [&](size_t a, size_t b) { return events[a].bytes > events[b].bytes; });
    allocs.resize(std::min<size_t>(allocs.size(), kLabelled));
    for (size_t k = 0; k < allocs.size(); ++k) {
      const memory::MemoryEvent& e = events[allocs[k]];
      const double px = f.px(static_cast<double>(allocs[k] - first)), py = f.py(live[allocs[k]]);
      const std::string what = std::to_string(k + 1) + ": " + (*e.op ? e.op : "?") + ", " + memory::role_name(e.role) +
                               ", " + memory::format_bytes(static_cast<int64_t>(e.bytes));
      s << "<circle class=\"big\" cx=\"" << px << "\" cy=\"" << py << "\" r=\"3\" fill=\"" << kRoleColors[int(e.role)]
        << "\"/><text x=\"" << px + 4 << "\" y=\"" << py - 5 << "\" font-size=\"10\">" << k + 1 << "</text>\n"
        << "<text class=\"big-label\" x=\"" << f.x + (k < 3 ? 0 : 430) << "\" y=\"" << f.y + f.h + 52 + 14.0 * (k % 3)
        << "\">" << svg::escape(what) << "</text>\n";
    }
    y += panel_h + gap;
  }

  // The arena: each in-step buffer a box from its birth to its death at its planned offset.
  {
    const std::vector<memory::BufferLifetime> buffers = trace.lifetimes();
    const double arena_mib = static_cast<double>(arena.bytes) / kMiB;
    const svg::Frame f{left, y + 10, plot_w, panel_h, 0, x_hi, 0, std::max(arena_mib * 1.05, 1e-6)};
    svg::axes(s, f,
              "planned arena (MiB offset): " + memory::format_bytes(arena.bytes) + " for in-step buffers; lower bound " +
                  memory::format_bytes(trace.in_step_peak_bytes()),
              "event");
    for (size_t i = 0; i < buffers.size() && i < arena.offsets.size(); ++i) {
      const memory::BufferLifetime& b = buffers[i];
      const double x0 = f.px(static_cast<double>(b.alloc_at) - static_cast<double>(first));
      const double x1 = f.px(static_cast<double>(b.free_at) - static_cast<double>(first));
      const double y0 = f.py(static_cast<double>(arena.offsets[i] + static_cast<int64_t>(b.bytes)) / kMiB);
      const double y1 = f.py(static_cast<double>(arena.offsets[i]) / kMiB);
      const memory::Role role = events[static_cast<size_t>(b.alloc_at)].role;
      s << "<rect class=\"buffer\" x=\"" << x0 << "\" y=\"" << y0 << "\" width=\"" << std::max(x1 - x0, 0.5)
        << "\" height=\"" << std::max(y1 - y0, 0.3) << "\" fill=\"" << kRoleColors[int(role)]
        << "\" fill-opacity=\"0.75\" stroke=\"#fff\" stroke-width=\"0.2\"/>\n";
    }
  }
  s << "</svg>\n";
  return s.str();
}

void check_timeline_path(const std::string& path) {
  const std::string probe = path + ".tmp";
  std::ofstream out(probe, std::ios::trunc);
  if (!out) throw examples::cli::UsageError("--timeline: cannot write " + path);
  out.close();
  std::remove(probe.c_str());
}

void write_timeline(const std::string& path, const memory::MemoryTrace& trace, const ArenaLayout& arena,
                    const std::string& title) {
  const std::string svg = timeline_svg(trace, arena, title), tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!(out << svg) || !out.flush()) throw std::runtime_error("--timeline: cannot write " + path);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error("--timeline: cannot write " + path);
  }
}

}  // namespace mixtrain::cli
