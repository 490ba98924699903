// The TCP rendezvous store's client (tcp_store.h); its frames are store_wire.h's, its server is
// store_server.cpp. The server never blocks on a client: waiting is the client's polling
// (store.cpp).
#include "distributed/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include "distributed/store_wire.h"
#include "mixtrain/base/error.h"

namespace mixtrain::distributed {

namespace {

using namespace wire;

bool send_all(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

void no_delay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

class TcpStore : public KeyValueStore {
 public:
  // host: MASTER_ADDR, for messages; rank 0 reaches its own server over loopback.
  // server: this process serves the store with these options (rank 0), reaching it where it
  // listens; null: a client only.
  TcpStore(std::string host, int port, const StoreServerOptions* server, const Deadline& deadline,
           std::string rank_name)
      : host_(std::move(host)), port_(port), serving_(server != nullptr), token_(store_token()) {
    who = std::move(rank_name);
    connect_host_ = !server ? host_ : server->bind_address.empty() ? "127.0.0.1" : server->bind_address;
    if (server) server_ = std::make_unique<TcpStoreServer>(port, *server);
    connect(deadline);
  }
  ~TcpStore() override {
    if (fd_ >= 0) ::close(fd_);
    server_.reset();  // after our own connection: the server thread sees it close first
  }

  bool ends_with_job() const override { return true; }
  bool serves_others() const override { return serving_; }

  std::string describe() const override {
    return "tcp://" + host_ + ":" + std::to_string(port_) +
           (serving_ ? " (served by this rank)" : store_served_by_launcher() ? " (served by the launcher)" : " (served by rank 0)");
  }

  void set(const std::string& key, const std::vector<char>& value, const Deadline& deadline) override {
    check_stored(key, request(kSet, {key, std::string(value.begin(), value.end())}, deadline));
  }

  bool set_if_absent(const std::string& key, const std::vector<char>& value, const Deadline& deadline) override {
    const auto r = request(kSetIfAbsent, {key, std::string(value.begin(), value.end())}, deadline);
    check_stored(key, r);
    MT_CHECK(r.first == kOk && r.second.size() == 1, "distributed rendezvous: the store at ", describe(),
             " answered a conditional set of ", key, " with something else");
    return r.second[0] == "1";
  }

  std::vector<bool> present(const std::vector<std::string>& keys, const Deadline& deadline) override {
    const auto r = request(kCheck, keys, deadline);
    MT_CHECK(r.second.size() == 1 && r.second[0].size() == keys.size(), "distributed rendezvous: the store at ",
             describe(), " answered a check of ", keys.size(), " keys with something else");
    std::vector<bool> out;
    for (char c : r.second[0]) out.push_back(c == '1');
    return out;
  }

  std::vector<char> get_now(const std::string& key, const Deadline& deadline) override {
    const auto r = request(kGet, {key}, deadline);
    MT_CHECK(r.first == kOk && r.second.size() == 1, "distributed rendezvous: key ", key, " vanished from the store at ",
             describe());
    return std::vector<char>(r.second[0].begin(), r.second[0].end());
  }

 private:
  using Reply = std::pair<uint8_t, std::vector<std::string>>;

  void check_stored(const std::string& key, const Reply& r) const {
    MT_CHECK(r.first != kFull, "distributed rendezvous: the store at ", describe(), " refused key ", key, ": ",
             r.second.empty() ? std::string("over its quota") : r.second[0]);
  }

  // Connects, retrying while nobody listens yet (rank 0 may start after this rank).
  void connect(const Deadline& deadline) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    const double report_every = wait_report_seconds();
    double next_report = report_every;
    std::string last = "no attempt";
    auto pause = std::chrono::milliseconds(10);
    for (;;) {
      addrinfo* res = nullptr;
      const int gai = ::getaddrinfo(connect_host_.c_str(), std::to_string(port_).c_str(), &hints, &res);
      if (gai != 0) {
        last = std::string("cannot resolve ") + connect_host_ + ": " + gai_strerror(gai);
      } else {
        for (addrinfo* a = res; a && fd_ < 0; a = a->ai_next) try_connect(a, deadline, last);
        ::freeaddrinfo(res);
      }
      if (fd_ >= 0 && hello(deadline, last)) return;
      if (deadline.passed())
        MT_ERROR("distributed rendezvous: ", who, " ", deadline.waited(), " for rank 0's store at ", describe(),
                 ": ", last, ". Rank 0 did not start or failed, or MASTER_ADDR/MASTER_PORT differ between ranks, ",
                 "or a firewall blocks the port");
      if (deadline.elapsed_seconds() >= next_report) {
        std::fprintf(stderr, "mixtrain rendezvous: %s has %s for rank 0's store at %s (%s)\n", who.c_str(),
                     deadline.waited().c_str(), describe().c_str(), last.c_str());
        std::fflush(stderr);
        next_report += report_every;
      }
      std::this_thread::sleep_for(std::min(pause, deadline.left()));
      pause = std::min(pause * 2, std::chrono::milliseconds(200));
    }
  }

  void try_connect(const addrinfo* a, const Deadline& deadline, std::string& last) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) return void(last = std::string("socket: ") + std::strerror(errno));
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      const int ms = static_cast<int>(std::min<int64_t>(deadline.left().count(), 2000));
      rc = ::poll(&p, 1, ms) == 1 ? 0 : -1;
      int err = rc == 0 ? 0 : ETIMEDOUT;
      socklen_t len = sizeof(err);
      if (rc == 0) getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      errno = err;
      rc = err == 0 ? 0 : -1;
    }
    if (rc != 0) {
      last = std::string("connect: ") + std::strerror(errno);
      ::close(fd);
      return;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    no_delay(fd);
    fd_ = fd;
  }

  bool hello(const Deadline& deadline, std::string& last) {
    try {
      const auto r = request(kHello, {kMagic, token_}, deadline);
      if (r.first == kOk && r.second.size() == 1) return true;
      if (r.first == kDenied) {
        ::close(fd_);
        fd_ = -1;
        MT_ERROR("distributed rendezvous: ", who, ": the store at ", describe(),
                 " refused this process: ", token_.empty() ? "it presented no token" : "its token is not the job's",
                 ". Give every process of the job the token the job's launcher made (MIXTRAIN_STORE_TOKEN, or "
                 "MIXTRAIN_STORE_TOKEN_FILE naming its file; `mixtrain launch` says where it is)");
      }
      last = "the server answered HELLO with status " + std::to_string(r.first);
    } catch (const Error& e) {
      if (fd_ < 0) throw;  // refused: no server to wait for
      last = e.what();
    }
    // Something listens that is not our store (or it is going away): not a rank 0 to wait for.
    ::close(fd_);
    fd_ = -1;
    MT_ERROR("distributed rendezvous: ", who, ": the server at ", describe(), " is not a mixtrain rendezvous store (",
             last, "). torchrun's agent serves its own store on MASTER_PORT: set MIXTRAIN_STORE=tcp://",
             host_, ":ANOTHER_PORT for mixtrain's, or choose a free MASTER_PORT");
  }

  std::pair<uint8_t, std::vector<std::string>> request(uint8_t op, const std::vector<std::string>& items,
                                                       const Deadline& deadline) {
    std::lock_guard<std::mutex> lock(mutex_);
    MT_CHECK(fd_ >= 0, "distributed rendezvous: ", who, " lost its connection to the store at ", describe());
    if (!send_all(fd_, frame(op, items))) lost("sending to it failed: " + std::string(std::strerror(errno)));
    // The server answers at once; waiting past the deadline (and a little slack for the last
    // poll) means it stopped answering.
    const auto limit = deadline.left() + std::chrono::seconds(1);
    const auto until = std::chrono::steady_clock::now() + limit;
    std::string in;
    for (;;) {
      uint8_t code = 0;
      std::vector<std::string> out;
      const int64_t used = parse_frame(in, code, out);
      if (used < 0) lost("it sent a malformed answer", false);
      if (used > 0) return {code, std::move(out)};
      const auto now = std::chrono::steady_clock::now();
      if (now >= until) lost("it did not answer within " + std::to_string(limit.count()) + " ms", false);
      pollfd p{fd_, POLLIN, 0};
      const int ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count()) + 1;
      if (::poll(&p, 1, ms) < 0 && errno != EINTR) lost(std::string("poll: ") + std::strerror(errno));
      if (!(p.revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n == 0) lost("it closed the connection");
      if (n < 0 && errno != EINTR) lost(std::string("receiving failed: ") + std::strerror(errno));
      if (n > 0) in.append(buf, static_cast<size_t>(n));
    }
  }

  // gone: the connection broke, so whoever serves the store ended; else it is there but stuck.
  [[noreturn]] void lost(const std::string& why, bool gone = true) {
    ::close(fd_);
    fd_ = -1;
    const char* server = store_served_by_launcher() ? "the launcher" : "rank 0";
    MT_ERROR("distributed rendezvous: ", who, " lost the store at ", describe(), ": ", why,
             serving_ ? ""
             : !gone  ? std::string(". ") + server +
                           " serves it and keeps the connection open, but stopped answering (stopped or overloaded)"
             : store_served_by_launcher()
                 ? std::string(". The launcher serves it: the launcher ended")
                 : std::string(". Rank 0 serves it: rank 0 ended (it failed, or finished before this rank)"));
  }

  std::string host_, connect_host_;
  int port_;
  bool serving_;
  std::string token_;
  std::unique_ptr<TcpStoreServer> server_;
  std::mutex mutex_;
  int fd_ = -1;
};

}  // namespace

std::shared_ptr<KeyValueStore> make_tcp_store(const std::string& host, int port, const StoreServerOptions* server,
                                              const Deadline& deadline, int rank, int world_size) {
  MT_CHECK(!host.empty(), "distributed rendezvous: no MASTER_ADDR for the store on port ", port);
  MT_CHECK(port > 0 && port < 65536, "distributed rendezvous: MASTER_PORT ", port, " is not a TCP port (1-65535)");
  return std::make_shared<TcpStore>(host, port, server, deadline,
                                    "rank " + std::to_string(rank) + " of " + std::to_string(world_size));
}

}  // namespace mixtrain::distributed
