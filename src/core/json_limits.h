#pragma once
// Bounded JSON: every document mixtrain reads is parsed through parse_json_bounded, which rejects
// nesting deeper than kMaxJsonDepth while parsing (before any recursive copy, dump or compare
// could overflow the stack), and error messages quote JSON values only through json_excerpt.
#include <cstddef>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace mixtrain::detail {

// No document mixtrain writes nests deeper than 6; 64 leaves room for callers' "extra" JSON.
constexpr int kMaxJsonDepth = 64;

using JsonCallback = std::function<bool(int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed)>;

// Parses `text`; throws mixtrain::Error naming `who` for invalid JSON or nesting deeper than
// kMaxJsonDepth. `extra` (optional) sees every parse event, as nlohmann's callback does.
nlohmann::json parse_json_bounded(const std::string& text, const std::string& who, const JsonCallback& extra = nullptr);

// Throws naming `who` when a value built in memory nests deeper than kMaxJsonDepth (checked
// without recursion), for loaders that take an nlohmann::json from the caller.
void check_json_depth(const nlohmann::json& value, const std::string& who);

// value.dump(indent); a string that is not valid UTF-8 (which JSON cannot hold) is a
// mixtrain::Error naming `who`, not nlohmann's type_error. Writers dump through this before they
// create any file, so a refused document leaves nothing behind.
std::string dump_json(const nlohmann::json& value, int indent, const std::string& who);

// At most max_chars characters of value.dump() (with "..." when cut); a value nested too deep to
// dump safely is described by its type only.
std::string json_excerpt(const nlohmann::json& value, size_t max_chars = 120);

}  // namespace mixtrain::detail
