// The TCP rendezvous store's server (store_server.h): one thread answers every client from its
// own poll loop. Sockets are non-blocking and a client's answers wait in its own buffer, read from
// no further until it takes them, so a client that stops reading holds up nobody but itself (and is
// dropped after slow_client). Before HELLO with the job's token a client may send nothing else,
// and at most a few KiB; what the clients store is bounded by the quotas.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <thread>
#include <unordered_map>

#include "distributed/store_wire.h"
#include "mixtrain/base/error.h"
#include "mixtrain/distributed/store_server.h"

namespace mixtrain::distributed {

using namespace wire;

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kHelloBytes = 4096;  // what a client may send before it is admitted

// Equal secrets, compared in a time that does not depend on where they differ.
bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

struct Listener {
  int fd = -1;
  int err = 0;
};

// A socket bound to `address` ("" every interface: IPv6 and IPv4 on one socket where the host
// has IPv6, else IPv4) and `port`.
Listener bind_listener(const std::string& address, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST;
  std::vector<std::pair<int, sockaddr_storage>> candidates;
  if (address.empty()) {
    sockaddr_storage s6{}, s4{};
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&s6);
    a6->sin6_family = AF_INET6;
    a6->sin6_addr = in6addr_any;
    a6->sin6_port = htons(static_cast<uint16_t>(port));
    auto* a4 = reinterpret_cast<sockaddr_in*>(&s4);
    a4->sin_family = AF_INET;
    a4->sin_addr.s_addr = htonl(INADDR_ANY);
    a4->sin_port = htons(static_cast<uint16_t>(port));
    candidates = {{AF_INET6, s6}, {AF_INET, s4}};
  } else {
    addrinfo* res = nullptr;
    const int gai = ::getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &res);
    MT_CHECK(gai == 0, "distributed rendezvous: the store's bind address \"", address,
             "\" is not a numeric address of this host (MIXTRAIN_STORE_BIND): ", gai_strerror(gai));
    for (addrinfo* a = res; a; a = a->ai_next) {
      sockaddr_storage s{};
      std::memcpy(&s, a->ai_addr, a->ai_addrlen);
      candidates.push_back({a->ai_family, s});
    }
    ::freeaddrinfo(res);
  }
  Listener out;
  for (const auto& [family, addr] : candidates) {
    const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      out.err = errno;
      continue;
    }
    int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (family == AF_INET6 && address.empty()) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    const socklen_t len = family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), len) == 0) return {fd, 0};
    out.err = errno;
    ::close(fd);
    if (out.err == EADDRINUSE) break;  // IPv4 on the same port would be taken too
  }
  return out;
}

int64_t env_quota(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  MT_CHECK(end && *end == '\0' && x > 0, "distributed: ", name, "=\"", v, "\" is not a positive integer");
  return static_cast<int64_t>(x);
}

}  // namespace

StoreServerOptions StoreServerOptions::for_job(const std::string& master_addr, bool one_host) {
  StoreServerOptions o;
  o.bind_address = store_bind_address(master_addr, one_host);
  o.token = store_token();
  o.max_bytes = env_quota("MIXTRAIN_STORE_MAX_BYTES", o.max_bytes);
  o.max_keys = env_quota("MIXTRAIN_STORE_MAX_KEYS", o.max_keys);
  return o;
}

struct TcpStoreServer::Impl {
  struct Client {
    int fd;
    std::string in, out;
    bool admitted = false;
    Clock::time_point since;  // connected, or its unread answers last moved
  };
  StoreServerOptions options;
  int listen_fd = -1;
  int port = 0;
  int stop[2] = {-1, -1};
  std::string generation;
  std::unordered_map<std::string, std::string> data;
  int64_t stored_bytes = 0;
  std::vector<Client> clients;
  Clock::time_point accept_paused_until{};
  std::thread thread;

  std::string quota_refusal(const std::string& key, const std::string& value) const {
    const auto it = data.find(key);
    const int64_t now = it == data.end() ? 0 : static_cast<int64_t>(key.size() + it->second.size());
    const int64_t after = stored_bytes - now + static_cast<int64_t>(key.size() + value.size());
    if (after > options.max_bytes)
      return "the store holds " + std::to_string(stored_bytes) + " bytes; " + std::to_string(value.size()) +
             " more would pass its quota of " + std::to_string(options.max_bytes) + " (MIXTRAIN_STORE_MAX_BYTES)";
    if (it == data.end() && static_cast<int64_t>(data.size()) >= options.max_keys)
      return "the store holds its quota of " + std::to_string(options.max_keys) + " keys (MIXTRAIN_STORE_MAX_KEYS)";
    return "";
  }

  void put(std::string key, std::string value) {
    const auto it = data.find(key);
    if (it != data.end()) stored_bytes -= static_cast<int64_t>(it->first.size() + it->second.size());
    stored_bytes += static_cast<int64_t>(key.size() + value.size());
    data[std::move(key)] = std::move(value);
  }

  // The answer to one request of an admitted client; empty: drop the client (after `out`).
  std::string answer_one(uint8_t op, std::vector<std::string>& items) {
    if ((op == kSet || op == kSetIfAbsent) && items.size() == 2) {
      if (op == kSetIfAbsent && data.count(items[0])) return frame(kOk, {"0"});
      const std::string refusal = quota_refusal(items[0], items[1]);
      if (!refusal.empty()) return frame(kFull, {refusal});
      // One thread answers every client, so the check and the write are one step.
      put(std::move(items[0]), std::move(items[1]));
      return op == kSet ? frame(kOk, {}) : frame(kOk, {"1"});
    }
    if (op == kGet && items.size() == 1) {
      auto it = data.find(items[0]);
      return it == data.end() ? frame(kMissing, {}) : frame(kOk, {it->second});
    }
    if (op == kCheck) {
      std::string bits;
      for (const auto& k : items) bits += data.count(k) ? '1' : '0';
      return frame(kOk, {bits});
    }
    return "";
  }

  // false: drop the client once its answers are sent (it closed, was refused, or sent something
  // that is not our protocol).
  bool answer(Client& c) {
    for (;;) {
      uint8_t op = 0;
      std::vector<std::string> items;
      const int64_t used = parse_frame(c.in, op, items);
      if (used < 0) return false;
      if (used == 0)  // incomplete: wait for more, within what this client may send
        return c.in.size() <= (c.admitted ? size_t{kMaxItemBytes} * 2 + 1024 : kHelloBytes);
      c.in.erase(0, static_cast<size_t>(used));
      if (!c.admitted) {
        const bool ours = op == kHello && !items.empty() && items.size() <= 2 && items[0] == kMagic;
        const std::string token = items.size() == 2 ? items[1] : "";
        if (!ours) return c.out += frame(kBad, {}), false;
        if (!options.token.empty() && !same_secret(token, options.token)) return c.out += frame(kDenied, {}), false;
        c.admitted = true;
        c.out += frame(kOk, {generation});
        continue;
      }
      const std::string reply = answer_one(op, items);
      if (reply.empty()) return c.out += frame(kBad, {}), false;
      c.out += reply;
      if (c.out.size() > (size_t{1} << 20)) return true;  // read no more until it takes these
    }
  }

  // Sends what the client can take now; false when it is gone.
  bool flush(Client& c) {
    while (!c.out.empty()) {
      const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      if (n <= 0) return false;
      c.out.erase(0, static_cast<size_t>(n));
      c.since = Clock::now();
    }
    return true;
  }

  // One client's turn after poll; false: drop it.
  bool serve(Client& c, short revents) {
    if (revents & (POLLERR | POLLNVAL)) return false;
    if ((revents & POLLOUT) && !flush(c)) return false;
    if (!c.out.empty()) return true;
    if (revents & (POLLIN | POLLHUP)) {
      char buf[65536];
      const ssize_t n = ::recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n == 0) return false;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
      if (n > 0) c.in.append(buf, static_cast<size_t>(n));
      if (n > 0 && c.admitted) c.since = Clock::now();
    }
    // Also the requests left unanswered while earlier answers waited.
    const bool keep = c.in.empty() || answer(c);
    return flush(c) && keep;
  }

  void accept_one() {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // Out of descriptors: stop accepting a moment instead of spinning on the ready socket.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        accept_paused_until = Clock::now() + std::chrono::milliseconds(100);
      return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    clients.push_back({fd, "", "", false, Clock::now()});
  }

  void run() {
    for (;;) {
      const auto now = Clock::now();
      const bool accepting = now >= accept_paused_until;
      std::vector<pollfd> fds = {{stop[0], POLLIN, 0}, {accepting ? listen_fd : -1, POLLIN, 0}};
      for (const auto& c : clients) fds.push_back({c.fd, static_cast<short>(c.out.empty() ? POLLIN : POLLOUT), 0});
      if (::poll(fds.data(), fds.size(), 200) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[0].revents) return;
      const auto after = Clock::now();
      for (size_t i = clients.size(); i-- > 0;) {
        Client& c = clients[i];
        bool keep = serve(c, fds[i + 2].revents);
        // Unread answers that do not move, or no HELLO: the client is stuck or not ours.
        if (keep && (!c.out.empty() || !c.admitted) && after - c.since > options.slow_client) keep = false;
        if (!keep) {
          ::close(c.fd);
          clients.erase(clients.begin() + static_cast<std::ptrdiff_t>(i));
        }
      }
      if (fds[1].revents & POLLIN) accept_one();
    }
  }
};

TcpStoreServer::TcpStoreServer(int port) : TcpStoreServer(port, StoreServerOptions::for_job("", true)) {}

TcpStoreServer::TcpStoreServer(int port, StoreServerOptions options) : impl_(std::make_unique<Impl>()) {
  MT_CHECK(port >= 0 && port < 65536, "distributed rendezvous: MASTER_PORT ", port, " is not a TCP port (1-65535)");
  MT_CHECK(options.max_bytes > 0 && options.max_keys > 0,
           "distributed rendezvous: the store's quotas must be positive");
  impl_->options = std::move(options);
  const Listener l = bind_listener(impl_->options.bind_address, port);
  const int fd = l.fd;
  if (fd < 0)
    MT_ERROR("distributed rendezvous: cannot serve the store on port ", port,
             impl_->options.bind_address.empty() ? "" : " of " + impl_->options.bind_address, ": ",
             std::strerror(l.err),
             l.err == EADDRINUSE ? ". Another process listens there: a job still running on this MASTER_PORT, or "
                                   "torchrun's own agent store (mixtrain's store is not torchrun's; under torchrun "
                                   "set MIXTRAIN_STORE=tcp://MASTER_ADDR:ANOTHER_PORT), or another program; choose "
                                   "another MASTER_PORT"
                                 : "");
  if (::listen(fd, 1024) != 0) {
    const int err = errno;
    ::close(fd);
    MT_ERROR("distributed rendezvous: listen on port ", port, " failed: ", std::strerror(err));
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
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

}  // namespace mixtrain::distributed
