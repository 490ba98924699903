#pragma once
// The TCP rendezvous store's server. Rank 0 serves it inside its process group (tcp://
// MASTER_ADDR:MASTER_PORT, as under torchrun), so a job that ends takes its keys with it; an
// elastic job needs a store that outlives any rank, so `mixtrain launch --elastic` serves it from
// the launcher and tells the ranks ($MIXTRAIN_STORE_SERVER=launcher) to be its clients only.
// docs/DISTRIBUTED.md, "Elastic membership".
#include <memory>

namespace mixtrain::distributed {

class TcpStoreServer {
 public:
  // Listens on `port` on every interface (IPv6 and IPv4; 0: a free port, see port()) and answers
  // on a thread of its own until destroyed. Error naming the port when it is taken.
  explicit TcpStoreServer(int port);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mixtrain::distributed
