// The TCP store's server against clients that are not the job's or do not behave: a client
// without the job's token is refused and stores nothing; clients that never read their answers
// hold up nobody else; what the clients store is bounded; a one-host job's store listens on
// loopback only. Everything on 127.0.0.0/8.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "distributed/store_wire.h"
#include "distributed/tcp_store.h"
#include "mixtrain/mixtrain.h"

namespace mt = mixtrain;
namespace dist = mixtrain::distributed;
namespace wire = mixtrain::distributed::wire;

namespace {

// Sets an environment variable for one test, and puts back what was there.
struct ScopedEnv {
  std::string name, old;
  bool had;
  ScopedEnv(const char* n, const char* value) : name(n), had(std::getenv(n) != nullptr) {
    if (had) old = std::getenv(n);
    if (value) setenv(n, value, 1);
    else unsetenv(n);
  }
  ~ScopedEnv() {
    if (had) setenv(name.c_str(), old.c_str(), 1);
    else unsetenv(name.c_str());
  }
};

// A raw connection to 127.0.0.x:port (-1 when refused).
int dial(int port, const char* ip = "127.0.0.1") {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, ip, &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void send_frame(int fd, uint8_t op, const std::vector<std::string>& items) {
  const std::string f = wire::frame(op, items);
  ASSERT_EQ(::send(fd, f.data(), f.size(), MSG_NOSIGNAL), static_cast<ssize_t>(f.size()));
}

// The status of the next answer on fd, or -1 when the server closed the connection (2 s at most).
int read_status(int fd) {
  std::string in;
  for (;;) {
    uint8_t code = 0;
    std::vector<std::string> items;
    if (wire::parse_frame(in, code, items) > 0) return code;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 2000) != 1) return -2;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return -1;
    in.append(buf, static_cast<size_t>(n));
  }
}

std::shared_ptr<dist::KeyValueStore> client(int port) {
  return dist::make_tcp_store("127.0.0.1", port, nullptr, dist::Deadline(std::chrono::seconds(3)), 1, 2);
}

dist::StoreServerOptions with_token(const std::string& token) {
  dist::StoreServerOptions o;
  o.bind_address = "127.0.0.1";
  o.token = token;
  return o;
}

}  // namespace

TEST(StoreServer, AClientWithoutTheJobsTokenIsRefusedAndStoresNothing) {
  dist::TcpStoreServer server(0, with_token("job-secret"));
  const dist::Deadline d(std::chrono::seconds(3));
  {
    ScopedEnv none("MIXTRAIN_STORE_TOKEN", nullptr);
    try {
      client(server.port());
      FAIL() << "a client without a token was admitted";
    } catch (const mt::Error& e) {
      EXPECT_NE(std::string(e.what()).find("refused this process: it presented no token"), std::string::npos)
          << e.what();
    }
  }
  {
    ScopedEnv wrong("MIXTRAIN_STORE_TOKEN", "job-secreT");
    EXPECT_THROW(client(server.port()), mt::Error);
  }
  // A stranger's raw requests: a set before HELLO, a HELLO with the wrong token; each ends its
  // connection, and the key is not there for the job's clients.
  int fd = dial(server.port());
  ASSERT_GE(fd, 0);
  send_frame(fd, wire::kSet, {"mixtrain/abort", "a stranger's note"});
  EXPECT_EQ(read_status(fd), wire::kBad);
  EXPECT_EQ(read_status(fd), -1);
  ::close(fd);
  fd = dial(server.port());
  send_frame(fd, wire::kHello, {wire::kMagic, "guess"});
  EXPECT_EQ(read_status(fd), wire::kDenied);
  ::close(fd);
  ScopedEnv right("MIXTRAIN_STORE_TOKEN", "job-secret");
  auto job = client(server.port());
  EXPECT_EQ(job->present({"mixtrain/abort"}, d), std::vector<bool>{false});
  job->set("k", {'v'}, d);
  EXPECT_EQ(job->get_now("k", d), std::vector<char>{'v'});
}

TEST(StoreServer, ClientsThatNeverReadTheirAnswersHoldUpNobodyElse) {
  ScopedEnv none("MIXTRAIN_STORE_TOKEN", nullptr);
  dist::StoreServerOptions o = with_token("");
  o.slow_client = std::chrono::milliseconds(1500);
  dist::TcpStoreServer server(0, o);
  const dist::Deadline d(std::chrono::seconds(10));
  auto job = client(server.port());
  job->set("big", std::vector<char>(8 << 20, 'x'), d);
  // Four clients ask for the 8 MiB value again and again and never read: their answers fill the
  // sockets' buffers.
  std::vector<int> stuck;
  for (int i = 0; i < 4; ++i) {
    const int fd = dial(server.port());
    ASSERT_GE(fd, 0);
    send_frame(fd, wire::kHello, {wire::kMagic});
    for (int k = 0; k < 8; ++k) send_frame(fd, wire::kGet, {"big"});
    stuck.push_back(fd);
  }
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 50; ++i) {
    job->set("n", {static_cast<char>(i)}, d);
    EXPECT_EQ(job->get_now("n", d), std::vector<char>{static_cast<char>(i)});
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 1.0) << "100 round trips beside four clients that do not read";
  // And the stuck ones are dropped once their answers have not moved for slow_client.
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  for (int fd : stuck) {
    char buf[65536];
    ssize_t n = 0, total = 0;
    while ((n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0) total += n;
    EXPECT_TRUE(n == 0 || (n < 0 && errno == ECONNRESET))
        << "the server still holds a client that never read (" << total << " bytes were waiting)";
    ::close(fd);
  }
}

TEST(StoreServer, WhatTheClientsStoreIsBounded) {
  ScopedEnv none("MIXTRAIN_STORE_TOKEN", nullptr);
  dist::StoreServerOptions o = with_token("");
  o.max_bytes = 1 << 20;
  o.max_keys = 100;
  dist::TcpStoreServer server(0, o);
  const dist::Deadline d(std::chrono::seconds(3));
  auto job = client(server.port());
  job->set("a", std::vector<char>(600 << 10, 'a'), d);
  try {
    job->set("b", std::vector<char>(600 << 10, 'b'), d);
    FAIL() << "a set past the byte quota was accepted";
  } catch (const mt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("refused key b: the store holds"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("MIXTRAIN_STORE_MAX_BYTES"), std::string::npos) << e.what();
  }
  job->set("a", std::vector<char>(900 << 10, 'a'), d);  // a key replaced counts once
  for (int k = 1; k < 100; ++k) job->set("k" + std::to_string(k), {'v'}, d);
  EXPECT_THROW(job->set("one-too-many", {'v'}, d), mt::Error);
  EXPECT_THROW(job->set_if_absent("one-too-many", {'v'}, d), mt::Error);
  EXPECT_EQ(job->get_now("k99", d), std::vector<char>{'v'});  // the store still answers
}

TEST(StoreServer, AOneHostJobsStoreListensOnLoopbackOnly) {
  ScopedEnv bind("MIXTRAIN_STORE_BIND", nullptr);
  EXPECT_EQ(dist::store_bind_address("", true), "127.0.0.1");
  EXPECT_EQ(dist::store_bind_address("127.0.0.1", true), "127.0.0.1");
  EXPECT_EQ(dist::store_bind_address("::1", true), "::1");
  EXPECT_EQ(dist::store_bind_address("203.0.113.9", false), "");         // not this host's: every interface
  EXPECT_EQ(dist::store_bind_address("127.0.0.1", false), "127.0.0.1");  // a local address
  {
    ScopedEnv any("MIXTRAIN_STORE_BIND", "*");
    EXPECT_EQ(dist::store_bind_address("", true), "");
  }
  // Bound to 127.0.0.1, another loopback address of this host does not reach it; bound to every
  // interface, it does.
  ScopedEnv none("MIXTRAIN_STORE_TOKEN", nullptr);
  dist::TcpStoreServer local(0, dist::StoreServerOptions::for_job("", true));
  int fd = dial(local.port(), "127.0.0.1");
  EXPECT_GE(fd, 0);
  ::close(fd);
  EXPECT_EQ(dial(local.port(), "127.0.0.2"), -1);
  dist::StoreServerOptions everywhere;
  dist::TcpStoreServer any(0, everywhere);
  fd = dial(any.port(), "127.0.0.2");
  EXPECT_GE(fd, 0);
  ::close(fd);
}

// One limit on the world size, checked where the launch variables are read; the largest world
// allowed ends its rendezvous within the timeout plus a second, naming a few of the missing.
TEST(LaunchLimits, TheWorldSizeHasOneLimitAndTheLargestWorldsWaitEndsInTime) {
  ScopedEnv rank("RANK", "0"), local("LOCAL_WORLD_SIZE", nullptr), store("MIXTRAIN_STORE", nullptr);
  ScopedEnv token("MIXTRAIN_STORE_TOKEN", nullptr), server("MIXTRAIN_STORE_SERVER", nullptr);
  for (const char* too_many : {"65537", "1073741823"}) {
    ScopedEnv world("WORLD_SIZE", too_many);
    try {
      dist::read_launch_env();
      ADD_FAILURE() << "WORLD_SIZE=" << too_many << " was accepted";
    } catch (const mt::Error& e) {
      EXPECT_NE(std::string(e.what()).find("is above mixtrain's limit of 65536 ranks"), std::string::npos) << e.what();
    }
  }
  if (!dist::gloo_available()) GTEST_SKIP() << "the rendezvous part: " << dist::unavailable_reason();
  int port = 0;
  {
    dist::TcpStoreServer probe(0, with_token(""));  // a free port, given back at once
    port = probe.port();
  }
  ScopedEnv world("WORLD_SIZE", "65536"), addr("MASTER_ADDR", "127.0.0.1"),
      master_port("MASTER_PORT", std::to_string(port).c_str()), timeout("MIXTRAIN_TIMEOUT_S", "2");
  const auto start = std::chrono::steady_clock::now();
  try {
    dist::new_process_group(dist::ProcessGroupOptions());
    ADD_FAILURE() << "a rendezvous of one rank of 65536 completed";
  } catch (const mt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing: rank 1, rank 2,"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(" and 65527 more"), std::string::npos) << e.what();
    EXPECT_LT(std::string(e.what()).size(), 2000u);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 3.0);
}

// A store that greets and then never answers (its server stopped, not ended): the client's wait
// ends at its deadline plus a second, saying the server stopped answering, not that it ended.
TEST(StoreServer, AServerThatStopsAnsweringIsNotSaidToHaveEnded) {
  ScopedEnv none("MIXTRAIN_STORE_TOKEN", nullptr), server_kind("MIXTRAIN_STORE_SERVER", "launcher");
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  socklen_t len = sizeof(a);
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
  std::thread mute([&] {
    const int fd = ::accept(listener, nullptr, nullptr);
    char buf[4096];
    (void)::recv(fd, buf, sizeof(buf), 0);  // HELLO
    const std::string ok = wire::frame(wire::kOk, {"gen"});
    (void)::send(fd, ok.data(), ok.size(), MSG_NOSIGNAL);
    std::this_thread::sleep_for(std::chrono::milliseconds(3500));  // then silence
    ::close(fd);
  });
  auto store = client(ntohs(a.sin_port));
  const auto start = std::chrono::steady_clock::now();
  try {
    store->present({"k"}, dist::Deadline(std::chrono::seconds(1)));
    ADD_FAILURE() << "a store that never answers answered";
  } catch (const mt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("stopped answering"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("the launcher ended"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.5);
  mute.join();
  ::close(listener);
}
