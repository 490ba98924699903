#pragma once
// The elastic agent's pieces shared by its files: the state a member sends to a joiner (or to a
// member a step behind), elastic_state.cpp; its records read back from the store,
// elastic_records.cpp.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "distributed/internal.h"
#include "mixtrain/distributed/elastic.h"

namespace mixtrain::distributed {

// Every member gives its completed steps; when they differ, the lowest rank with the most sends
// its state (parameters, buffers, optimizer, scaler, scheduler, generator, extra) and the others
// take it. Returns whether this rank took it (its `steps` is then the sender's).
bool sync_state(ProcessGroup& group, const ElasticState& state, int64_t& steps);

// Why `j` is not a member entry ({"id": non-empty, "weight": positive, "who"}) whose id is none
// of `taken`; empty when it is one.
std::string elastic_member_problem(const nlohmann::json& j, const std::vector<std::string>& taken);
// Join request k as a joiner writes it ({"id", "weight", "who"}), or null when it is not one (a
// line on stderr says why): a malformed request is its writer's error, so rank 0 passes over it.
nlohmann::json read_join_request(const std::vector<char>& v, int64_t k, const std::vector<std::string>& taken);
// A generation record (members in rank order, each a member entry with a unique id; optional
// next_join count, lost/joined names, cause and reason) or null when it is not one, with a line on
// stderr naming `key`. Its first writer decided the generation (set_if_absent), so a malformed one
// makes that generation unusable; every process reads the same bytes and passes over it alike.
nlohmann::json read_generation_record(const std::vector<char>& v, const std::string& key);

}  // namespace mixtrain::distributed
