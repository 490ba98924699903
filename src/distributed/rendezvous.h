#pragma once
// The rendezvous's own phase, before Gloo connects (rendezvous.cpp), and the address each rank
// advertises to its peers.
#include <string>
#include <vector>

#include "distributed/internal.h"

namespace mixtrain::distributed {

// The job's id when the launcher gives one ($MIXTRAIN_RUN_ID, torchrun's $TORCHELASTIC_RUN_ID,
// Slurm's $SLURM_JOB_ID), else empty. Keys in a store that outlives jobs carry it.
std::string run_id();

// `hostname` (ProcessGroupOptions) if given, else $MIXTRAIN_GLOO_HOST, else the interface named
// by $GLOO_SOCKET_IFNAME (as in PyTorch), else the local address of the interface that routes to
// MASTER_ADDR, else 127.0.0.1 when every rank is on this host, else this host's name.
GlooAddress advertised_address(const LaunchEnv& env, const std::string& hostname);

struct JoinResult {
  std::vector<std::string> hosts;  // per rank: the address it advertised
};

// Publishes this rank and waits, within the deadline, for every rank of the world to do the
// same; a peer with another world size, job id or collective check setting, or a second
// process with this rank, is an Error as soon as it is seen.
JoinResult join(KeyValueStore& store, const LaunchEnv& env, const GlooAddress& address, bool check_collectives,
                const Deadline& deadline);

}  // namespace mixtrain::distributed
