// Tensor::str() and operator<<: PyTorch's repr (torch/_tensor_str.py) for the dtypes we have.
// One formatter for the whole tensor (from the summarised values when summarising) picks integer,
// fixed or scientific notation and a common width; rows wrap at the line width; dimensions
// longer than 2 * edgeitems are summarised with "..." when the tensor has more than threshold
// elements.
#include <cmath>
#include <cstdio>
#include <mutex>
#include <sstream>

#include "mixtrain/autograd/node.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/ops/functional.h"
#include "mixtrain/ops/printing.h"

namespace mixtrain {

namespace {

std::mutex& options_mutex() {
  static std::mutex m;
  return m;
}
PrintOptions& options_ref() {
  static PrintOptions o;
  return o;
}

// The values on the host as doubles (floats, of which halves are widened as PyTorch does) or
// int64 (integers and bools).
struct HostValues {
  Shape shape;
  std::vector<double> f;
  std::vector<int64_t> i;
  bool floating = false, boolean = false;
};

HostValues host_values(const Tensor& t) {
  NoGradGuard no_grad;
  HostValues h;
  h.shape = t.shape();
  h.floating = is_floating(t.dtype());
  h.boolean = t.dtype() == kBool;
  const Tensor c = t.detach().to(Device::cpu());
  if (h.floating)
    h.f = c.to(kFloat64).contiguous().to_vector<double>();
  else
    h.i = c.to(kInt64).contiguous().to_vector<int64_t>();
  return h;
}

std::string printf_str(const char* fmt, int precision, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, precision, v);
  return buf;
}

class Formatter {
 public:
  Formatter(const HostValues& h, const std::vector<int64_t>& summarised, const PrintOptions& o)
      : h_(h), precision_(o.precision) {
    if (!h.floating) {
      for (int64_t k : summarised) width_ = std::max(width_, plain(k).size());
      return;
    }
    std::vector<double> vals;
    for (int64_t k : summarised) {
      const double v = h.f[static_cast<size_t>(k)];
      if (std::isfinite(v) && v != 0.0) vals.push_back(v);
    }
    if (vals.empty()) return;
    double lo = std::fabs(vals[0]), hi = lo;
    for (double v : vals) {
      lo = std::min(lo, std::fabs(v));
      hi = std::max(hi, std::fabs(v));
      if (v != std::ceil(v)) int_mode_ = false;
    }
    sci_ = hi / lo > 1000.0 || hi > 1.0e8 || (!int_mode_ && lo < 1.0e-4);
    for (double v : vals) {
      const size_t len = sci_ ? printf_str("%.*e", precision_, v).size()
                              : int_mode_ ? printf_str("%.*f", 0, v).size() + 1 : printf_str("%.*f", precision_, v).size();
      width_ = std::max(width_, len);
    }
  }

  size_t width() const { return width_; }

  std::string format(int64_t k) const {
    std::string s;
    if (!h_.floating) {
      s = plain(k);
    } else {
      const double v = h_.f[static_cast<size_t>(k)];
      if (std::isnan(v))
        s = "nan";
      else if (std::isinf(v))
        s = v > 0 ? "inf" : "-inf";
      else if (sci_)
        s = printf_str("%.*e", precision_, v);
      else if (int_mode_)
        s = printf_str("%.*f", 0, v) + ".";
      else
        s = printf_str("%.*f", precision_, v);
    }
    return s.size() < width_ ? std::string(width_ - s.size(), ' ') + s : s;
  }

 private:
  std::string plain(int64_t k) const {
    const int64_t v = h_.i[static_cast<size_t>(k)];
    return h_.boolean ? (v ? "True" : "False") : std::to_string(v);
  }

  const HostValues& h_;
  int precision_;
  size_t width_ = 1;
  bool int_mode_ = true, sci_ = false;
};

class Printer {
 public:
  Printer(const HostValues& h, const PrintOptions& o) : h_(h), o_(o) {
    summarise_ = static_cast<int64_t>(h.floating ? h.f.size() : h.i.size()) > o.threshold;
    strides_.assign(h.shape.size(), 1);
    for (size_t d = h.shape.size(); d-- > 1;) strides_[d - 1] = strides_[d] * h.shape[d];
  }

  std::string print(size_t indent) {
    std::vector<int64_t> shown;
    collect(0, 0, shown);
    Formatter f(h_, shown, o_);
    return block(0, 0, indent, f);
  }

 private:
  // The positions kept along dim d (all, or edgeitems at each end with -1 for the "...").
  std::vector<int64_t> kept(size_t d) const {
    const int64_t n = h_.shape[d], e = o_.edgeitems;
    std::vector<int64_t> out;
    if (summarise_ && n > 2 * e) {
      for (int64_t i = 0; i < e; ++i) out.push_back(i);
      out.push_back(-1);
      for (int64_t i = n - e; i < n; ++i) out.push_back(i);
    } else {
      for (int64_t i = 0; i < n; ++i) out.push_back(i);
    }
    return out;
  }

  void collect(size_t d, int64_t base, std::vector<int64_t>& out) const {
    if (d == h_.shape.size()) {
      out.push_back(base);
      return;
    }
    for (int64_t i : kept(d))
      if (i >= 0) collect(d + 1, base + i * strides_[d], out);
  }

  std::string block(size_t d, int64_t base, size_t indent, const Formatter& f) const {
    const size_t dims = h_.shape.size();
    if (dims == 0) return f.format(0);
    if (d + 1 == dims) {  // a row: wrapped at the line width
      const size_t per_line =
          std::max<size_t>(1, static_cast<size_t>(std::max<int64_t>(0, o_.linewidth - static_cast<int64_t>(indent))) /
                                  (f.width() + 2));
      std::vector<std::string> items;
      for (int64_t i : kept(d)) items.push_back(i < 0 ? " ..." : f.format(base + i * strides_[d]));
      std::string s = "[";
      for (size_t k = 0; k < items.size(); ++k) {
        if (k > 0) s += k % per_line == 0 ? ",\n" + std::string(indent + 1, ' ') : ", ";
        s += items[k];
      }
      return s + "]";
    }
    const std::string sep = "," + std::string(dims - d - 1, '\n') + std::string(indent + 1, ' ');
    std::string s = "[";
    bool first = true;
    for (int64_t i : kept(d)) {
      if (!first) s += sep;
      first = false;
      s += i < 0 ? "..." : block(d + 1, base + i * strides_[d], indent + 1, f);
    }
    return s + "]";
  }

  const HostValues& h_;
  PrintOptions o_;
  bool summarise_ = false;
  std::vector<int64_t> strides_;
};

std::string shape_tuple(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

}  // namespace

void set_printoptions(const PrintOptions& options) {
  std::lock_guard<std::mutex> lock(options_mutex());
  options_ref() = options;
}

PrintOptions printoptions() {
  std::lock_guard<std::mutex> lock(options_mutex());
  return options_ref();
}

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  const PrintOptions o = printoptions();
  const std::string prefix = "tensor(";
  std::vector<std::string> suffixes;
  if (!device().is_cpu()) suffixes.push_back("device='" + device().str() + "'");
  std::string body;
  if (device().is_meta()) {  // no values to show: PyTorch's form, with the dtype always named
    body = "...";
    suffixes.push_back("size=" + shape_tuple(shape()));
    suffixes.push_back(std::string("dtype=torch.") + dtype_name(dtype()));
  } else if (numel() == 0) {
    body = "[]";
    if (dim() != 1) suffixes.push_back("size=" + shape_tuple(shape()));
    if (dtype() != kFloat32) suffixes.push_back(std::string("dtype=torch.") + dtype_name(dtype()));
  } else {
    if (dtype() != kFloat32 && dtype() != kInt64 && dtype() != kBool)
      suffixes.push_back(std::string("dtype=torch.") + dtype_name(dtype()));
    const HostValues h = host_values(*this);
    body = Printer(h, o).print(prefix.size());
  }
  if (grad_fn())
    suffixes.push_back(std::string("grad_fn=<") + grad_fn()->name() + ">");
  else if (requires_grad())
    suffixes.push_back("requires_grad=True");
  // Suffixes go on the last line while it stays within the line width.
  std::string s = prefix + body;
  // As PyTorch counts it: len(s) - s.rfind("\n") + 1, with rfind -1 when there is no newline.
  const size_t nl = s.rfind('\n');
  size_t last_line = nl == std::string::npos ? s.size() + 2 : s.size() - nl + 1;
  for (const std::string& suffix : suffixes) {
    if (last_line + suffix.size() + 2 > static_cast<size_t>(o.linewidth)) {
      s += ",\n" + std::string(prefix.size(), ' ') + suffix;
      last_line = prefix.size() + suffix.size();
    } else {
      s += ", " + suffix;
      last_line += suffix.size() + 2;
    }
  }
  return s + ")";
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace mixtrain
