#pragma once
// The elastic agent's pieces shared by its files: the state a member sends to a joiner (or to a
// member a step behind), elastic_state.cpp.
#include <cstdint>

#include "distributed/internal.h"
#include "mixtrain/distributed/elastic.h"

namespace mixtrain::distributed {

// Every member gives its completed steps; when they differ, the lowest rank with the most sends
// its state (parameters, buffers, optimizer, scaler, scheduler, generator, extra) and the others
// take it. Returns whether this rank took it (its `steps` is then the sender's).
bool sync_state(ProcessGroup& group, const ElasticState& state, int64_t& steps);

}  // namespace mixtrain::distributed
