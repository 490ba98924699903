#pragma once
// The rendezvous store at MASTER_ADDR:MASTER_PORT, as torchrun's users expect one: rank 0 serves a
// small key-value store over TCP (like PyTorch's c10d TCPStore, not wire-compatible with it) and
// every rank, rank 0 included, is its client. The store lives as long as rank 0's process group,
// so a job that ends, cleanly or not, takes its keys with it and the next job on the same port
// starts from an empty store.
#include <memory>
#include <string>
#include <vector>

#include "distributed/internal.h"
#include "mixtrain/distributed/store_server.h"

namespace mixtrain::distributed {

// A client of the store at host:port, presenting store_token(). `server`: this process serves
// the store with these options (rank 0); null: it is a client only. Connecting retries until the
// deadline (the server's rank may start later), reporting progress; a server that refuses the
// token is an Error at once.
std::shared_ptr<KeyValueStore> make_tcp_store(const std::string& host, int port, const StoreServerOptions* server,
                                              const Deadline& deadline, int rank, int world_size);

}  // namespace mixtrain::distributed
