// The rendezvous before Gloo's: every rank publishes who it is (world size, rank, host, process,
// job id) and waits for all the others, so that a rank that never comes is named, a rank started
// with another world size or job is named plainly (instead of Gloo's failing on address sizes),
// and a lone rank says what it waits for. Also: the address a rank advertises to its peers.
#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <map>
#include <thread>
#include <sstream>

#include "distributed/rendezvous.h"
#include "distributed/env.h"
#include "distributed/host_name.h"
#include "mixtrain/base/error.h"

namespace mixtrain::distributed {

namespace {

// The local address of the interface that routes to host: a UDP socket "connected" there sends
// nothing, but the kernel picks the source address it would use.
std::string route_source(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  const int gai = getaddrinfo(host.c_str(), std::to_string(port > 0 ? port : 9).c_str(), &hints, &res);
  MT_CHECK(gai == 0, "distributed rendezvous: cannot resolve MASTER_ADDR=", host, ": ", gai_strerror(gai));
  std::string out, why = "no address";
  for (addrinfo* a = res; a && out.empty(); a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 && getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET6_ADDRSTRLEN] = {0};
      const void* addr = local.ss_family == AF_INET6
                             ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
                             : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
      if (inet_ntop(local.ss_family, addr, buf, sizeof(buf))) out = buf;
    } else {
      why = std::strerror(errno);
    }
    close(fd);
  }
  freeaddrinfo(res);
  MT_CHECK(!out.empty(), "distributed rendezvous: no route from this host to MASTER_ADDR=", host, " (", why,
           "); set GLOO_SOCKET_IFNAME to the interface that reaches the other hosts");
  return out;
}

using Fields = std::map<std::string, std::string>;

Fields parse_fields(const std::vector<char>& v) {
  Fields f;
  std::istringstream is(std::string(v.begin(), v.end()));
  for (std::string tok; is >> tok;) {
    const auto eq = tok.find('=');
    if (eq != std::string::npos) f[tok.substr(0, eq)] = tok.substr(eq + 1);
  }
  return f;
}

std::string field(const Fields& f, const char* key) {
  const auto it = f.find(key);
  return it == f.end() ? "?" : it->second;
}

}  // namespace

std::string run_id() {
  for (const char* name : {"MIXTRAIN_RUN_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"})
    if (const char* v = env_value(name)) return v;
  return "";
}

GlooAddress advertised_address(const LaunchEnv& e, const std::string& hostname) {
  if (!hostname.empty()) return {hostname, ""};
  if (const char* h = env_value("MIXTRAIN_GLOO_HOST")) return {h, ""};
  if (const char* i = env_value("GLOO_SOCKET_IFNAME")) {
    // PyTorch takes a list, one interface per device; Gloo here uses one.
    std::string first(i);
    first = first.substr(0, first.find(','));
    return {"", first};
  }
  if (!e.master_addr.empty()) return {route_source(e.master_addr, e.master_port), ""};
  if (e.local_world_size == e.world_size) return {"127.0.0.1", ""};  // every rank on this host
  return {this_host(), ""};
}

JoinResult join(KeyValueStore& store, const LaunchEnv& e, const GlooAddress& address, bool check_collectives,
                const Deadline& deadline) {
  const std::string run = run_id();
  std::ostringstream me;
  me << "world=" << e.world_size << " rank=" << e.rank << " host=" << this_host() << " pid=" << getpid()
     << " addr=" << (address.hostname.empty() ? address.iface : address.hostname)
     << " check=" << (check_collectives ? 1 : 0) << " run=" << (run.empty() ? "-" : run);
  const std::string mine = me.str();
  store.set("mixtrain/join/" + std::to_string(e.rank), std::vector<char>(mine.begin(), mine.end()), deadline);

  std::vector<std::string> keys;
  WaitFor why;
  why.what = "every rank to join (WORLD_SIZE=" + std::to_string(e.world_size) + ")";
  for (int r = 0; r < e.world_size; ++r) {
    keys.push_back("mixtrain/join/" + std::to_string(r));
    why.owners.push_back("rank " + std::to_string(r));
  }
  JoinResult result;
  result.hosts.assign(static_cast<size_t>(e.world_size), "");
  std::vector<bool> seen(keys.size(), false);
  const Fields own = parse_fields(std::vector<char>(mine.begin(), mine.end()));
  const std::string abort_key = "mixtrain/abort";
  why.on_poll = [&](const std::vector<bool>& have) {
    if (store.ends_with_job() && store.present({abort_key}, deadline)[0]) {
      const std::vector<char> note = store.get_now(abort_key, deadline);
      MT_ERROR("distributed rendezvous: ", std::string(note.begin(), note.end()));
    }
    for (size_t r = 0; r < keys.size(); ++r) {
      if (!have[r] || seen[r]) continue;
      seen[r] = true;
      const Fields f = parse_fields(store.get_now(keys[r], deadline));
      const std::string who = "rank " + std::to_string(r) + " (host " + field(f, "host") + ", pid " + field(f, "pid") + ")";
      MT_CHECK(field(f, "world") == field(own, "world"), "distributed rendezvous: ", who, " was started with WORLD_SIZE=",
               field(f, "world"), " but this process (rank ", e.rank, ", host ", field(own, "host"), ") with WORLD_SIZE=",
               e.world_size, ". Every process of a job needs the same world size");
      MT_CHECK(static_cast<int>(r) != e.rank || (field(f, "host") == field(own, "host") && field(f, "pid") == field(own, "pid")),
               "distributed rendezvous: two processes claim rank ", e.rank, ": this one (host ", field(own, "host"),
               ", pid ", field(own, "pid"), ") and ", who, ". Every process needs its own RANK");
      MT_CHECK(field(f, "run") == field(own, "run"), "distributed rendezvous: ", who, " belongs to job ", field(f, "run"),
               " but this rank to job ", field(own, "run"), " (MIXTRAIN_RUN_ID, TORCHELASTIC_RUN_ID or SLURM_JOB_ID)");
      MT_CHECK(field(f, "check") == field(own, "check"), "distributed rendezvous: ", who,
               " checks its collectives' shapes (MIXTRAIN_CHECK_COLLECTIVES) ", field(f, "check") == "1" ? "" : "not ",
               "but this rank does", field(own, "check") == "1" ? "" : " not", ": every rank needs the same setting");
      result.hosts[r] = field(f, "addr");
    }
  };
  try {
    store.wait(keys, deadline, why);
  } catch (const Error& err) {
    if (!store.ends_with_job()) throw;
    // Tell the ranks still waiting why this one stops (the first note stays), and when this rank
    // serves the store keep it up a moment so that they can read it before the store goes.
    try {
      if (!store.present({abort_key}, deadline)[0]) {
        const std::string note = "rank " + std::to_string(e.rank) + " stopped the rendezvous: " + err.what();
        store.set(abort_key, std::vector<char>(note.begin(), note.end()), deadline);
      }
    } catch (const Error&) {  // the store is gone too: nothing to tell anyone
    }
    if (store.serves_others()) std::this_thread::sleep_for(std::min(deadline.left(), std::chrono::milliseconds(1000)));
    throw;
  }
  return result;
}

}  // namespace mixtrain::distributed
