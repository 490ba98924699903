#include "core/json_limits.h"

#include <utility>
#include <vector>

#include "mixtrain/base/error.h"

namespace mixtrain::detail {

namespace {

// Depth of `value` (a scalar is 0, [] is 1), walking with an explicit stack; stops early
// once past `limit`.
int json_depth(const nlohmann::json& value, int limit) {
  std::vector<std::pair<const nlohmann::json*, int>> todo{{&value, 0}};
  int deepest = 0;
  while (!todo.empty()) {
    auto [v, d] = todo.back();
    todo.pop_back();
    if (!v->is_structured()) continue;
    deepest = std::max(deepest, d + 1);
    if (deepest > limit) return deepest;
    for (const auto& child : *v) todo.emplace_back(&child, d + 1);
  }
  return deepest;
}

struct DepthExceeded {};

}  // namespace

nlohmann::json parse_json_bounded(const std::string& text, const std::string& who, const JsonCallback& extra) {
  nlohmann::json out;
  try {
    out = nlohmann::json::parse(text, [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
      // nlohmann reports depth 0 for the top-level object's start; the value at depth d is
      // nested d + 1 deep.
      if ((ev == nlohmann::json::parse_event_t::object_start || ev == nlohmann::json::parse_event_t::array_start) &&
          depth >= kMaxJsonDepth)
        throw DepthExceeded{};
      return extra ? extra(depth, ev, parsed) : true;
    });
  } catch (const DepthExceeded&) {
    MT_ERROR(who, ": the JSON nests deeper than the limit of ", kMaxJsonDepth, " levels; refusing it");
  } catch (const nlohmann::json::exception& e) {
    // nlohmann quotes the offending token, which can be as long as the input.
    std::string what = e.what();
    if (what.size() > 300) what = what.substr(0, 300) + "...";
    MT_ERROR(who, ": not valid JSON: ", what);
  }
  return out;
}

void check_json_depth(const nlohmann::json& value, const std::string& who) {
  MT_CHECK(json_depth(value, kMaxJsonDepth) <= kMaxJsonDepth, who, ": the JSON nests deeper than the limit of ",
           kMaxJsonDepth, " levels; refusing it");
}

std::string dump_json(const nlohmann::json& value, int indent, const std::string& who) {
  try {
    return value.dump(indent);
  } catch (const nlohmann::json::type_error& e) {
    MT_ERROR(who, ": a string is not valid UTF-8, which JSON cannot hold (", e.what(), "); refusing to write it");
  }
}

std::string json_excerpt(const nlohmann::json& value, size_t max_chars) {
  if (json_depth(value, kMaxJsonDepth) > kMaxJsonDepth) return std::string("<") + value.type_name() + " nested too deep to show>";
  std::string s = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > max_chars) s = s.substr(0, max_chars) + "...";
  return s;
}

}  // namespace mixtrain::detail
