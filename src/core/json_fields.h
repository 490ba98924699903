#pragma once
// Typed, validated reads of JSON fields for the state_dict loaders (optimizers, schedulers,
// scaler, checkpoints). Each throws mixtrain::Error naming where the document came from and the
// field, so a bad file is rejected with a message that says what to fix.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

namespace mixtrain::json_io {

// j must be an object whose keys are exactly `required` plus any of `optional`.
void check_object_keys(const nlohmann::json& j, std::initializer_list<const char*> required,
                       std::initializer_list<const char*> optional, const std::string& where);
const nlohmann::json& json_field(const nlohmann::json& j, const char* key, const std::string& where);
// A finite number (integers accepted).
double json_number(const nlohmann::json& j, const char* key, const std::string& where);
// An integer (not a float, not a bool) within [lo, hi].
int64_t json_integer(const nlohmann::json& j, const char* key, const std::string& where, int64_t lo, int64_t hi);
uint64_t json_unsigned(const nlohmann::json& j, const char* key, const std::string& where);
bool json_bool(const nlohmann::json& j, const char* key, const std::string& where);
std::string json_string(const nlohmann::json& j, const char* key, const std::string& where);
std::pair<double, double> json_number_pair(const nlohmann::json& j, const char* key, const std::string& where);
// "param_groups[1]" style paths.
std::string json_path(const std::string& where, const std::string& key);
std::string json_path(const std::string& where, size_t index);

}  // namespace mixtrain::json_io
