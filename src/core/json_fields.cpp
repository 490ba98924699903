#include "core/json_limits.h"
#include "core/json_fields.h"

#include <cmath>
#include <limits>

#include "mixtrain/base/error.h"

namespace mixtrain::json_io {

namespace {
const char* type_name(const nlohmann::json& v) {
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}
}  // namespace

std::string json_path(const std::string& where, const std::string& key) { return where + "." + key; }
std::string json_path(const std::string& where, size_t index) { return where + "[" + std::to_string(index) + "]"; }

void check_object_keys(const nlohmann::json& j, std::initializer_list<const char*> required,
                       std::initializer_list<const char*> optional, const std::string& where) {
  MT_CHECK(j.is_object(), where, ": expected a JSON object, got ", type_name(j));
  for (const char* key : required) MT_CHECK(j.contains(key), where, ": missing field \"", key, "\"");
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = false;
    for (const char* key : required) known = known || it.key() == key;
    for (const char* key : optional) known = known || it.key() == key;
    MT_CHECK(known, where, ": unknown field \"", it.key(), "\"");
  }
}

const nlohmann::json& json_field(const nlohmann::json& j, const char* key, const std::string& where) {
  MT_CHECK(j.is_object(), where, ": expected a JSON object, got ", type_name(j));
  auto it = j.find(key);
  MT_CHECK(it != j.end(), where, ": missing field \"", key, "\"");
  return *it;
}

double json_number(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto& v = json_field(j, key, where);
  MT_CHECK(v.is_number(), json_path(where, key), " must be a number, got ", type_name(v));
  const double d = v.get<double>();
  MT_CHECK(std::isfinite(d), json_path(where, key), " must be finite, got ", d);
  return d;
}

int64_t json_integer(const nlohmann::json& j, const char* key, const std::string& where, int64_t lo, int64_t hi) {
  const auto& v = json_field(j, key, where);
  MT_CHECK(v.is_number_integer(), json_path(where, key), " must be an integer, got ", type_name(v),
           v.is_number() ? " " + mixtrain::detail::json_excerpt(v) : std::string());
  int64_t x;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    MT_CHECK(u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), json_path(where, key),
             " is out of range: ", u);
    x = static_cast<int64_t>(u);
  } else {
    x = v.get<int64_t>();
  }
  MT_CHECK(x >= lo && x <= hi, json_path(where, key), " must be in [", lo, ", ", hi, "], got ", x);
  return x;
}

uint64_t json_unsigned(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto& v = json_field(j, key, where);
  MT_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0), json_path(where, key),
           " must be a non-negative integer, got ", type_name(v), v.is_number() ? " " + mixtrain::detail::json_excerpt(v) : std::string());
  return v.get<uint64_t>();
}

bool json_bool(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto& v = json_field(j, key, where);
  MT_CHECK(v.is_boolean(), json_path(where, key), " must be a boolean, got ", type_name(v));
  return v.get<bool>();
}

std::string json_string(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto& v = json_field(j, key, where);
  MT_CHECK(v.is_string(), json_path(where, key), " must be a string, got ", type_name(v));
  return v.get<std::string>();
}

std::pair<double, double> json_number_pair(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto& v = json_field(j, key, where);
  MT_CHECK(v.is_array() && v.size() == 2 && v[0].is_number() && v[1].is_number(), json_path(where, key),
           " must be an array of two numbers, got ", mixtrain::detail::json_excerpt(v));
  const double a = v[0].get<double>(), b = v[1].get<double>();
  MT_CHECK(std::isfinite(a) && std::isfinite(b), json_path(where, key), " must be finite, got ", mixtrain::detail::json_excerpt(v));
  return {a, b};
}

}  // namespace mixtrain::json_io
