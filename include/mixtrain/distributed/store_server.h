#pragma once
// The TCP rendezvous store's server. Rank 0 serves it inside its process group (tcp://
// MASTER_ADDR:MASTER_PORT, as under torchrun), so a job that ends takes its keys with it; an
// elastic job needs a store that outlives any rank, so `mixtrain launch --elastic` serves it from
// the launcher and tells the ranks ($MIXTRAIN_STORE_SERVER=launcher) to be its clients only.
// Clients present the job's token when one is set; what they may store is bounded, and a client
// that stops reading its answers holds nobody up. docs/DISTRIBUTED.md, "The rendezvous store".
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace mixtrain::distributed {

struct StoreServerOptions {
  // Where to listen: "" every interface (IPv6 and IPv4), else one address of this host.
  std::string bind_address;
  // The job's secret: a client whose HELLO does not carry it is refused. Empty: any client.
  std::string token;
  // What all clients together may store (keys and values) and how many keys; a set beyond
  // either is refused with a message naming the quota ($MIXTRAIN_STORE_MAX_BYTES, _MAX_KEYS).
  int64_t max_bytes = int64_t{256} << 20;
  int64_t max_keys = int64_t{1} << 20;
  // A client with answers unread for this long, or that has not said HELLO in it, is dropped.
  std::chrono::milliseconds slow_client{5000};
  // The options for a job's store: bind where the job's ranks reach it (see store_bind_address),
  // the token of store_token(), the quotas of the environment.
  static StoreServerOptions for_job(const std::string& master_addr, bool one_host);
};

// $MIXTRAIN_STORE_BIND when set ("*": every interface); else loopback when every rank is on this
// host and MASTER_ADDR is unset or a loopback address; else MASTER_ADDR when it is a numeric
// address of this host; else every interface.
std::string store_bind_address(const std::string& master_addr, bool one_host);

// The job's store token: $MIXTRAIN_STORE_TOKEN, else the first line of the file
// $MIXTRAIN_STORE_TOKEN_FILE names (an Error when it cannot be read), else empty (no token: any
// client that reaches the port is admitted, as before tokens existed).
std::string store_token();

// For `mixtrain launch` on one host: when no token is set, makes a random one, puts it in this
// process's environment ($MIXTRAIN_STORE_TOKEN, inherited by the ranks it starts, never on a
// command line) and writes it to DIR/store-token (mode 0600) for `--join`
// ($MIXTRAIN_STORE_TOKEN_FILE). Returns that file, or "" when a token was already set.
std::string make_job_store_token(const std::string& dir);

class TcpStoreServer {
 public:
  // Listens on `port` (0: a free port, see port()) and answers on a thread of its own until
  // destroyed. Error naming the port when it is taken. The one-argument form listens where
  // StoreServerOptions::for_job("", true) does.
  explicit TcpStoreServer(int port);
  TcpStoreServer(int port, StoreServerOptions options);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mixtrain::distributed
