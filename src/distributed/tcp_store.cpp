// The TCP rendezvous store (tcp_store.h). Frames, both ways: u8 op-or-status, u32 count, then
// count x (u32 length, bytes), lengths in network order. A connection starts with HELLO, which
// checks that the server is ours (a torchrun agent's store on the same port is not) and gives its
// generation: a random id per server, so keys can never be those of an earlier job's server.
// The server never blocks on a client: waiting is the client's polling (store.cpp).
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

#include "mixtrain/base/error.h"

namespace mixtrain::distributed {

namespace {

enum Op : uint8_t { kHello = 1, kSet = 2, kGet = 3, kCheck = 4, kSetIfAbsent = 5 };
enum Status : uint8_t { kOk = 0, kMissing = 1, kBad = 2 };
constexpr char kMagic[] = "mixtrain-store-1";
constexpr uint32_t kMaxItems = 1u << 16;
constexpr uint32_t kMaxItemBytes = 64u << 20;

void put_u32(std::string& out, uint32_t v) {
  const uint32_t n = htonl(v);
  out.append(reinterpret_cast<const char*>(&n), 4);
}

uint32_t get_u32(const char* p) {
  uint32_t n;
  std::memcpy(&n, p, 4);
  return ntohl(n);
}

std::string frame(uint8_t code, const std::vector<std::string>& items) {
  std::string out(1, static_cast<char>(code));
  put_u32(out, static_cast<uint32_t>(items.size()));
  for (const auto& it : items) {
    put_u32(out, static_cast<uint32_t>(it.size()));
    out += it;
  }
  return out;
}

// A complete frame at the front of `buf`: its size, 0 while incomplete, -1 when malformed.
int64_t parse_frame(const std::string& buf, uint8_t& code, std::vector<std::string>& items) {
  if (buf.size() < 5) return 0;
  code = static_cast<uint8_t>(buf[0]);
  const uint32_t n = get_u32(buf.data() + 1);
  if (n > kMaxItems) return -1;
  size_t at = 5;
  items.clear();
  for (uint32_t i = 0; i < n; ++i) {
    if (buf.size() < at + 4) return 0;
    const uint32_t len = get_u32(buf.data() + at);
    if (len > kMaxItemBytes) return -1;
    at += 4;
    if (buf.size() < at + len) return 0;
    items.emplace_back(buf.data() + at, len);
    at += len;
  }
  return static_cast<int64_t>(at);
}

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

}  // namespace

struct TcpStoreServer::Impl {
  struct Client {
    int fd;
    std::string in;
  };
  int listen_fd = -1;
  int port = 0;
  int stop[2] = {-1, -1};
  std::string generation;
  std::unordered_map<std::string, std::string> data;
  std::vector<Client> clients;
  std::thread thread;

  // false: drop the client (it closed, or sent something that is not our protocol).
  bool answer(Client& c) {
    for (;;) {
      uint8_t op = 0;
      std::vector<std::string> items;
      const int64_t used = parse_frame(c.in, op, items);
      if (used < 0) return false;
      if (used == 0) return c.in.size() <= (size_t{kMaxItemBytes} * 2);  // incomplete: wait for more
      c.in.erase(0, static_cast<size_t>(used));
      std::string reply;
      if (op == kHello && items.size() == 1 && items[0] == kMagic) {
        reply = frame(kOk, {generation});
      } else if (op == kSet && items.size() == 2) {
        data[items[0]] = std::move(items[1]);
        reply = frame(kOk, {});
      } else if (op == kSetIfAbsent && items.size() == 2) {
        // One thread answers every client, so the check and the write are one step.
        const bool fresh = data.emplace(std::move(items[0]), std::move(items[1])).second;
        reply = frame(kOk, {fresh ? "1" : "0"});
      } else if (op == kGet && items.size() == 1) {
        auto it = data.find(items[0]);
        reply = it == data.end() ? frame(kMissing, {}) : frame(kOk, {it->second});
      } else if (op == kCheck) {
        std::string bits;
        for (const auto& k : items) bits += data.count(k) ? '1' : '0';
        reply = frame(kOk, {bits});
      } else {
        send_all(c.fd, frame(kBad, {}));
        return false;
      }
      if (!send_all(c.fd, reply)) return false;
    }
  }

  void run() {
    for (;;) {
      std::vector<pollfd> fds = {{listen_fd, POLLIN, 0}, {stop[0], POLLIN, 0}};
      for (const auto& c : clients) fds.push_back({c.fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[1].revents) return;
      for (size_t i = clients.size(); i-- > 0;) {
        if (!fds[i + 2].revents) continue;
        char buf[65536];
        const ssize_t n = ::recv(clients[i].fd, buf, sizeof(buf), MSG_DONTWAIT);
        bool keep = n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR));
        if (n > 0) {
          clients[i].in.append(buf, static_cast<size_t>(n));
          keep = answer(clients[i]);
        }
        if (!keep) {
          ::close(clients[i].fd);
          clients.erase(clients.begin() + static_cast<std::ptrdiff_t>(i));
        }
      }
      if (fds[0].revents & POLLIN) {
        const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) {
          no_delay(fd);
          timeval tv{5, 0};  // a client that stops reading its answers cannot stall the store
          setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
          clients.push_back({fd, ""});
        }
      }
    }
  }
};

TcpStoreServer::TcpStoreServer(int port) : impl_(std::make_unique<Impl>()) {
  MT_CHECK(port >= 0 && port < 65536, "distributed rendezvous: MASTER_PORT ", port, " is not a TCP port (1-65535)");
  // IPv6 and IPv4 on one socket where the host has IPv6, else IPv4 alone.
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1, zero = 0;
  int err = 0;
  if (fd >= 0) {
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) err = errno, ::close(fd), fd = -1;
  }
  if (fd < 0 && err != EADDRINUSE) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    MT_CHECK(fd >= 0, "distributed rendezvous: socket() failed: ", std::strerror(errno));
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    err = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 ? 0 : errno;
    if (err) ::close(fd), fd = -1;
  }
  if (fd < 0)
    MT_ERROR("distributed rendezvous: rank 0 cannot serve the store on port ", port, ": ", std::strerror(err),
             err == EADDRINUSE ? ". Another process listens there: a job still running on this MASTER_PORT, or "
                                 "torchrun's own agent store (mixtrain's store is not torchrun's; under torchrun "
                                 "set MIXTRAIN_STORE=tcp://MASTER_ADDR:ANOTHER_PORT), or another program; choose "
                                 "another MASTER_PORT"
                               : "");
  if (::listen(fd, 1024) != 0) {
    err = errno;
    ::close(fd);
    MT_ERROR("distributed rendezvous: listen on port ", port, " failed: ", std::strerror(err));
  }
  impl_->listen_fd = fd;
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  MT_CHECK(::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0, "distributed rendezvous: getsockname ",
           "failed: ", std::strerror(errno));
  impl_->port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                  : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  MT_CHECK(::pipe2(impl_->stop, O_CLOEXEC) == 0, "distributed rendezvous: pipe failed: ", std::strerror(errno));
  std::random_device rd;
  impl_->generation = std::to_string((static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(getpid()));
  impl_->thread = std::thread([this] { impl_->run(); });
}

int TcpStoreServer::port() const { return impl_->port; }

TcpStoreServer::~TcpStoreServer() {
  const char c = 0;
  [[maybe_unused]] const ssize_t n = ::write(impl_->stop[1], &c, 1);
  impl_->thread.join();
  for (auto& cl : impl_->clients) ::close(cl.fd);
  ::close(impl_->listen_fd);
  ::close(impl_->stop[0]);
  ::close(impl_->stop[1]);
}

namespace {

class TcpStore : public KeyValueStore {
 public:
  // host: MASTER_ADDR, for messages; rank 0 reaches its own server over loopback.
  TcpStore(std::string host, int port, bool serve, const Deadline& deadline, std::string rank_name)
      : host_(std::move(host)), connect_host_(serve ? "127.0.0.1" : host_), port_(port), serving_(serve) {
    who = std::move(rank_name);
    if (serve) server_ = std::make_unique<TcpStoreServer>(port);
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
    request(kSet, {key, std::string(value.begin(), value.end())}, deadline);
  }

  bool set_if_absent(const std::string& key, const std::vector<char>& value, const Deadline& deadline) override {
    const auto r = request(kSetIfAbsent, {key, std::string(value.begin(), value.end())}, deadline);
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
      const auto r = request(kHello, {kMagic}, deadline);
      if (r.first == kOk && r.second.size() == 1) return true;
      last = "the server answered HELLO with status " + std::to_string(r.first);
    } catch (const Error& e) {
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
      if (used < 0) lost("it sent a malformed answer");
      if (used > 0) return {code, std::move(out)};
      const auto now = std::chrono::steady_clock::now();
      if (now >= until) lost("it did not answer within " + std::to_string(limit.count()) + " ms");
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

  [[noreturn]] void lost(const std::string& why) {
    ::close(fd_);
    fd_ = -1;
    MT_ERROR("distributed rendezvous: ", who, " lost the store at ", describe(), ": ", why,
             serving_                     ? ""
             : store_served_by_launcher() ? ". The launcher serves it: the launcher ended"
                                          : ". Rank 0 serves it: rank 0 ended (it failed, or finished before this rank)");
  }

  std::string host_, connect_host_;
  int port_;
  bool serving_;
  std::unique_ptr<TcpStoreServer> server_;
  std::mutex mutex_;
  int fd_ = -1;
};

}  // namespace

std::shared_ptr<KeyValueStore> make_tcp_store(const std::string& host, int port, bool serve, const Deadline& deadline,
                                              int rank, int world_size) {
  MT_CHECK(!host.empty(), "distributed rendezvous: no MASTER_ADDR for the store on port ", port);
  MT_CHECK(port > 0 && port < 65536, "distributed rendezvous: MASTER_PORT ", port, " is not a TCP port (1-65535)");
  return std::make_shared<TcpStore>(host, port, serve, deadline,
                                    "rank " + std::to_string(rank) + " of " + std::to_string(world_size));
}

}  // namespace mixtrain::distributed
