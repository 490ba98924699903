// The elastic agent's records as read back from the store (elastic_internal.h). Any process that
// reaches the store can write there, so nothing read is trusted: a record is parsed without
// exceptions and checked field by field, and a malformed one is its writer's error, passed over
// with a line on stderr naming the key and why (never nlohmann's exception ending the job).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "distributed/elastic_internal.h"

namespace mixtrain::distributed {

std::string elastic_member_problem(const nlohmann::json& j, const std::vector<std::string>& taken) {
  if (j.is_discarded() || !j.is_object()) return "not a JSON object";
  if (!j.contains("id") || !j["id"].is_string() || j["id"].get<std::string>().empty()) return "no id";
  if (!j.contains("weight") || !j["weight"].is_number() || !(j["weight"].get<double>() > 0) ||
      !std::isfinite(j["weight"].get<double>()))
    return "no positive weight";
  if (!j.contains("who") || !j["who"].is_string()) return "no who";
  if (std::find(taken.begin(), taken.end(), j["id"].get<std::string>()) != taken.end())
    return "its id is a member's already";
  return "";
}

nlohmann::json read_join_request(const std::vector<char>& v, int64_t k, const std::vector<std::string>& taken) {
  const nlohmann::json j = nlohmann::json::parse(v.begin(), v.end(), nullptr, false);
  const std::string why = elastic_member_problem(j, taken);
  if (why.empty()) return {{"id", j["id"]}, {"weight", j["weight"]}, {"who", j["who"]}};
  std::fprintf(stderr, "mixtrain elastic: ignoring join request %lld in the store: %s (%zu bytes)\n",
               static_cast<long long>(k), why.c_str(), v.size());
  std::fflush(stderr);
  return nullptr;
}

namespace {
// Why generation record `j` cannot be followed, or empty when it can.
std::string generation_record_problem(const nlohmann::json& j) {
  if (j.is_discarded() || !j.is_object()) return "not a JSON object";
  if (!j.contains("members") || !j["members"].is_array() || j["members"].empty()) return "no members";
  std::vector<std::string> ids;
  for (const auto& m : j["members"]) {
    const std::string why = elastic_member_problem(m, ids);
    if (!why.empty()) return "member " + std::to_string(ids.size()) + ": " + why;
    ids.push_back(m["id"].get<std::string>());
  }
  if (j.contains("next_join") && !(j["next_join"].is_number_integer() && j["next_join"].get<int64_t>() >= 0))
    return "next_join is not a count";
  for (const char* list : {"lost", "joined"}) {
    if (!j.contains(list)) continue;
    const nlohmann::json& l = j[list];
    if (!l.is_array() || !std::all_of(l.begin(), l.end(), [](const nlohmann::json& e) { return e.is_string(); }))
      return std::string(list) + " is not a list of names";
  }
  for (const char* text : {"cause", "reason"})
    if (j.contains(text) && !j[text].is_string()) return std::string(text) + " is not a string";
  return "";
}
}  // namespace

nlohmann::json read_generation_record(const std::vector<char>& v, const std::string& key) {
  nlohmann::json j = nlohmann::json::parse(v.begin(), v.end(), nullptr, false);
  const std::string why = generation_record_problem(j);
  if (why.empty()) return j;
  std::fprintf(stderr, "mixtrain elastic: ignoring generation record %s in the store: %s (%zu bytes)\n", key.c_str(),
               why.c_str(), v.size());
  std::fflush(stderr);
  return nullptr;
}

}  // namespace mixtrain::distributed
