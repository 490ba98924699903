#include "common/cli.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <ostream>
#include <sstream>

namespace mixtrain::examples::cli {

namespace {

constexpr size_t kHelpWidth = 80, kColumn = 28;  // the help fits an 80-column terminal
std::string wrap(const std::string& text, size_t width);

// "--steps N   training steps (default: 200)": the type after the name, the default after the
// description (CLI11's own "N=200" is easy to misread as part of the flag).
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_option_opts(const CLI::Option* opt) const override {
    if (opt->get_type_size() == 0) return "";
    std::string s = " " + opt->get_type_name();
    if (opt->get_expected_max() == CLI::detail::expected_max_vector_size) s += ",...";
    if (opt->get_required()) s += " (required)";
    return s;
  }
  std::string make_option_desc(const CLI::Option* opt) const override {
    std::string d = opt->get_description();
    if (opt->get_type_size() != 0 && !opt->get_default_str().empty() && !opt->get_required())
      d += " (default:\x01" + opt->get_default_str() + ")";  // \x01: a space wrap keeps
    std::string text = wrap(d, kHelpWidth - kColumn);
    std::replace(text.begin(), text.end(), '\x01', ' ');
    return text;
  }
};

// Breaks text at spaces into lines of at most `width` characters (a longer word stays whole);
// CLI11 indents each line after a '\n' to the description column.
std::string wrap(const std::string& text, size_t width) {
  std::string out, line, word;
  std::istringstream words(text);
  while (words >> word) {
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  return out + line;
}

bool whole_integer(const std::string& s, long long& out) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return false;
  char* end = nullptr;
  errno = 0;
  out = std::strtoll(s.c_str(), &end, 10);
  return errno == 0 && end && *end == '\0';
}

}  // namespace

std::unique_ptr<CLI::App> make_app(const std::string& name, const std::string& description) {
  auto app = std::make_unique<CLI::App>(wrap(description, kHelpWidth - 1), name);
  auto formatter = std::make_shared<HelpFormatter>();
  formatter->label("Usage", "usage");
  formatter->column_width(kColumn);
  app->formatter(formatter);
  app->option_defaults()->always_capture_default();
  app->set_help_flag("-h,--help", "print this help and exit");
  // Extras are collected so an unknown flag is reported by name (CLI11 lists them with values).
  app->allow_extras();
  return app;
}

bool parse(CLI::App& app, const std::vector<std::string>& args, std::ostream& help_out) {
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last first
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    help_out << app.help();
    return false;
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  const std::vector<std::string> extra = app.remaining();
  for (const auto& a : extra)
    if (a.size() > 1 && a[0] == '-') throw UsageError("unknown flag " + a + " (see --help)");
  if (!extra.empty()) throw UsageError("unexpected argument '" + extra[0] + "' (see --help)");
  return true;
}

bool parse(CLI::App& app, int argc, char** argv, std::ostream& help_out) {
  return parse(app, std::vector<std::string>(argv + std::min(argc, 1), argv + argc), help_out);
}

CLI::Validator integer_at_least(int64_t min) {
  return CLI::Validator(
      [min](std::string& s) -> std::string {
        long long v = 0;
        if (whole_integer(s, v) && v >= min) return "";
        return "expects an integer >= " + std::to_string(min) + ", got '" + s + "'";
      },
      "");
}

CLI::Validator integer_in(int64_t min, int64_t max) {
  return CLI::Validator(
      [min, max](std::string& s) -> std::string {
        long long v = 0;
        if (whole_integer(s, v) && v >= min && v <= max) return "";
        return "expects an integer from " + std::to_string(min) + " to " + std::to_string(max) + ", got '" + s + "'";
      },
      "");
}

CLI::Validator unsigned_integer() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        const bool digits = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
        char* end = nullptr;
        errno = 0;
        if (digits) std::strtoull(s.c_str(), &end, 10);
        if (digits && errno == 0) return "";
        return "expects a non-negative integer below 2^64, got '" + s + "'";
      },
      "");
}

CLI::Validator finite_number(bool positive) {
  return CLI::Validator(
      [positive](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = s.empty() ? 0.0 : std::strtod(s.c_str(), &end);
        if (end && *end == '\0' && std::isfinite(v) && (!positive || v > 0)) return "";
        return std::string("expects a ") + (positive ? "positive " : "finite ") + "number, got '" + s + "'";
      },
      "");
}

CLI::Validator one_of(const std::vector<std::string>& names) {
  return CLI::Validator(
      [names](std::string& s) -> std::string {
        if (std::find(names.begin(), names.end(), s) != names.end()) return "";
        std::string list;
        for (size_t i = 0; i < names.size(); ++i) list += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
        return "expects " + list + ", got '" + s + "'";
      },
      "");
}

CLI::Validator device_name() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        long long index = 0;
        if (s == "cpu" || s == "cuda" || (s.rfind("cuda:", 0) == 0 && whole_integer(s.substr(5), index) && index >= 0))
          return "";
        return "expects cpu, cuda or cuda:N, got '" + s + "'";
      },
      "");
}

void add_precision_flag(CLI::App& app, train::Precision& precision) {
  app.add_option_function<std::string>(
         "--precision", [&precision](const std::string& v) { precision = train::parse_precision(v); },
         "fp32, or autocast to fp16 (with loss scaling) or bf16, or fp8 (the Linear layers in FP8, delayed "
         "scaling, HYBRID; bf16 elsewhere)")
      ->check(one_of({"fp32", "fp16", "bf16", "fp8"}))
      ->type_name("fp32|fp16|bf16|fp8")
      ->default_str(train::precision_name(precision));
}

void add_device_flag(CLI::App& app, Device& device) {
  app.add_option_function<std::string>(
         "--device", [&device](const std::string& v) { device = train::parse_device(v); },
         "where to train (default: cuda when present, else cpu)")
      ->check(device_name())
      ->type_name("cpu|cuda");
}

}  // namespace mixtrain::examples::cli
