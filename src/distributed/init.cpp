// The launch contract (environment variables set by torchrun, mpirun, Slurm or `mixtrain
// launch`), the rendezvous, and the default process group.
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>

#include "distributed/rendezvous.h"
#include "distributed/tcp_store.h"
#include "distributed/env.h"
#include "mixtrain/base/error.h"

namespace mixtrain::distributed {

namespace {

int env_int(const char* name, int fallback) {
  const char* v = env_value(name);
  if (!v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  MT_CHECK(end && *end == '\0' && x >= 0 && x < (1L << 30), "distributed: environment variable ", name, "=\"", v,
           "\" is not a non-negative integer");
  return static_cast<int>(x);
}

std::mutex g_mutex;
std::shared_ptr<ProcessGroup> g_default;

// A write to a peer that died (Gloo's pairs, a store's socket) must fail with EPIPE, which the
// caller reports naming the peer, not end the writer: SIGPIPE's default kills the process, and
// one killed rank would take the ranks writing to it along. Ignored once, where a process first
// reaches its store or its peers (as PyTorch's c10d does for Gloo); a handler the program set is
// kept.
void ignore_sigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction now {};
    if (sigaction(SIGPIPE, nullptr, &now) == 0 && !(now.sa_flags & SA_SIGINFO) && now.sa_handler == SIG_DFL)
      signal(SIGPIPE, SIG_IGN);
  });
}

}  // namespace

LaunchEnv read_launch_env() {
  LaunchEnv e;
  // Each launcher's names, in order of precedence: torchrun's (also set by `mixtrain launch`),
  // Open MPI's, Slurm's.
  struct Names {
    const char *source, *rank, *size, *local_rank, *local_size;
  };
  const Names launchers[] = {
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
      {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
  };
  e.source = "none";
  for (const Names& n : launchers) {
    if (!env_value(n.rank) && !env_value(n.size)) continue;
    MT_CHECK(env_value(n.rank) && env_value(n.size), "distributed: ", env_value(n.rank) ? n.size : n.rank, " is not set but ",
             env_value(n.rank) ? n.rank : n.size, " is (", n.source, "'s launch contract needs both)");
    e.source = n.source;
    e.rank = env_int(n.rank, 0);
    e.world_size = env_int(n.size, 1);
    e.local_rank = env_int(n.local_rank, e.rank);
    e.local_world_size = env_int(n.local_size, e.world_size);
    MT_CHECK(e.world_size >= 1, "distributed: ", n.size, "=", e.world_size, " must be at least 1");
    MT_CHECK(e.world_size <= kMaxWorldSize, "distributed: ", n.size, "=", e.world_size,
             " is above mixtrain's limit of ", kMaxWorldSize, " ranks");
    MT_CHECK(e.rank < e.world_size, "distributed: ", n.rank, "=", e.rank, " is not below ", n.size, "=",
             e.world_size);
    break;
  }
  if (const char* a = env_value("MASTER_ADDR")) e.master_addr = a;
  e.master_port = env_int("MASTER_PORT", 0);
  e.restart_count = env_int("MIXTRAIN_RESTART_COUNT", env_int("TORCHELASTIC_RESTART_COUNT", 0));
  auto flag = [](const char* name) {
    const char* v = env_value(name);
    MT_CHECK(!v || std::string(v) == "0" || std::string(v) == "1", "distributed: ", name, "=\"", v,
             "\" is neither 0 nor 1");
    return v && std::string(v) == "1";
  };
  e.elastic = flag("MIXTRAIN_ELASTIC");
  e.elastic_join = flag("MIXTRAIN_ELASTIC_JOIN");
  MT_CHECK(!e.elastic_join || e.elastic, "distributed: MIXTRAIN_ELASTIC_JOIN=1 joins an elastic job; set ",
           "MIXTRAIN_ELASTIC=1 too (mixtrain launch --join does)");
  return e;
}

bool store_served_by_launcher() {
  const char* v = env_value("MIXTRAIN_STORE_SERVER");
  if (!v) return false;
  const std::string s = v;
  MT_CHECK(s == "launcher" || s == "rank0", "distributed: MIXTRAIN_STORE_SERVER=\"", s,
           "\" is neither rank0 (rank 0 serves the TCP store, the default) nor launcher");
  return s == "launcher";
}

// Empty: a store of the process's own (make_private_store).
std::string default_store_spec(const LaunchEnv& e) {
  if (const char* s = env_value("MIXTRAIN_STORE")) return s;
  if (e.world_size == 1 && e.master_port == 0) return "";
  MT_CHECK(e.master_port != 0, "distributed: no rendezvous store. Set MASTER_ADDR and MASTER_PORT (rank 0 serves ",
           "the store there, as under torchrun), or MIXTRAIN_STORE=tcp://host:port, file:/dir (a directory every ",
           "rank reaches) or redis://host:port, or start the job with `mixtrain launch`");
  MT_CHECK(!e.master_addr.empty() || e.local_world_size == e.world_size, "distributed: MASTER_PORT=", e.master_port,
           " is set but not MASTER_ADDR, and the ranks are on several hosts (LOCAL_WORLD_SIZE=", e.local_world_size,
           " of WORLD_SIZE=", e.world_size, "): set MASTER_ADDR to the address of rank 0's host");
  int port = e.master_port;
  // torchrun's agent serves its own store (PyTorch's protocol) on MASTER_PORT when it tells its
  // workers to use it; mixtrain's store takes the next port.
  if (const char* agent = env_value("TORCHELASTIC_USE_AGENT_STORE"))
    if (std::string(agent) == "True" || std::string(agent) == "1") port += 1;
  return "tcp://" + (e.master_addr.empty() ? std::string("127.0.0.1") : e.master_addr) + ":" + std::to_string(port);
}

std::shared_ptr<KeyValueStore> open_store(const std::string& spec, const LaunchEnv& e, const Deadline& deadline) {
  ignore_sigpipe();
  std::shared_ptr<KeyValueStore> store;
  if (spec.rfind("tcp://", 0) == 0) {
    const std::string rest = spec.substr(6);
    const auto colon = rest.rfind(':');
    std::string host = colon == std::string::npos ? "" : rest.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    char* end = nullptr;
    const long port = colon == std::string::npos ? 0 : std::strtol(rest.c_str() + colon + 1, &end, 10);
    MT_CHECK(!host.empty() && port > 0 && port < 65536 && end && *end == '\0', "distributed: store \"", spec,
             "\" is not tcp://host:port");
    const bool serve = e.rank == 0 && !e.elastic_join && !store_served_by_launcher();
    StoreServerOptions server;
    if (serve) server = StoreServerOptions::for_job(e.master_addr, e.local_world_size == e.world_size);
    store = make_tcp_store(host, static_cast<int>(port), serve ? &server : nullptr, deadline, e.rank, e.world_size);
  } else if (spec.empty()) {
    store = make_private_store();
  } else {
    const std::string run = run_id();
    store = make_file_or_redis_store(spec, run.empty() ? "" : "mixtrain-run/" + run + "/");
  }
  store->who = "rank " + std::to_string(e.rank) + " of " + std::to_string(e.world_size);
  return store;
}

bool group_checks_collectives(const ProcessGroupOptions& options) {
  const char* v = env_value("MIXTRAIN_CHECK_COLLECTIVES");
  if (!v) return options.check_collectives();
  const std::string s = v;
  MT_CHECK(s == "0" || s == "1", "distributed: MIXTRAIN_CHECK_COLLECTIVES=\"", s, "\" is neither 0 nor 1");
  return s == "1";
}

std::chrono::milliseconds group_timeout(const ProcessGroupOptions& options) {
  std::chrono::milliseconds timeout = options.timeout();
  if (env_value("MIXTRAIN_TIMEOUT_S")) timeout = std::chrono::seconds(env_int("MIXTRAIN_TIMEOUT_S", 300));
  MT_CHECK(timeout.count() > 0, "init_process_group: the timeout must be positive");
  return timeout;
}

std::shared_ptr<ProcessGroup> connect_group(std::shared_ptr<KeyValueStore> store, const LaunchEnv& e,
                                            std::chrono::milliseconds timeout, bool check, const std::string& hostname,
                                            const Deadline& deadline) {
  ignore_sigpipe();
  const GlooAddress address = advertised_address(e, hostname);
  const JoinResult joined = join(*store, e, address, check, deadline);
  std::unique_ptr<ProcessGroup::Backend> cpu = make_gloo_backend(*store, e.rank, e.world_size, address, deadline);
  return std::make_shared<ProcessGroup>(e, timeout, std::move(cpu), std::move(store), check, joined.hosts);
}

std::shared_ptr<ProcessGroup> new_process_group(const ProcessGroupOptions& options) {
  LaunchEnv e = read_launch_env();
  if (options.world_size() >= 0) {
    MT_CHECK(e.source == "none" || options.world_size() == e.world_size, "init_process_group: world_size ",
             options.world_size(), " does not match the environment's ", e.world_size, " (from ", e.source, ")");
    if (e.source == "none") e.world_size = e.local_world_size = options.world_size();
  }
  if (options.rank() >= 0) {
    MT_CHECK(e.source == "none" || options.rank() == e.rank, "init_process_group: rank ", options.rank(),
             " does not match the environment's ", e.rank, " (from ", e.source, ")");
    if (e.source == "none") e.rank = e.local_rank = options.rank();
  }
  MT_CHECK(e.world_size >= 1 && e.rank >= 0 && e.rank < e.world_size, "init_process_group: rank ", e.rank,
           " is not in a group of ", e.world_size);
  MT_CHECK(e.world_size <= kMaxWorldSize, "init_process_group: world_size ", e.world_size,
           " is above mixtrain's limit of ", kMaxWorldSize, " ranks");
  const std::chrono::milliseconds timeout = group_timeout(options);
  if (!gloo_available()) {
    MT_CHECK(nccl_available(), "init_process_group: ", unavailable_reason());
    MT_ERROR("init_process_group: this build has NCCL but no Gloo, and NCCL's rendezvous goes through Gloo's ",
             "store. ", unavailable_reason());
  }
  // One deadline for every phase: the store, the join, Gloo's connections and the last barrier.
  const Deadline deadline(timeout);
  std::shared_ptr<KeyValueStore> store =
      open_store(options.store().empty() ? default_store_spec(e) : options.store(), e, deadline);
  auto group =
      connect_group(std::move(store), e, timeout, group_checks_collectives(options), options.hostname(), deadline);
  // The launcher's shares, read once every rank has joined: every rank reads the same variables,
  // so a bad value stops every rank with the same message, none of them before the others are
  // there to say it too.
  group->set_rank_shares(launch_rank_shares(e.world_size));
  return group;
}

std::shared_ptr<ProcessGroup> init_process_group(const ProcessGroupOptions& options) {
  std::lock_guard<std::mutex> lock(g_mutex);
  MT_CHECK(g_default == nullptr, "init_process_group: the default group already exists (call ",
           "destroy_process_group first)");
  g_default = new_process_group(options);
  return g_default;
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_default != nullptr;
}

ProcessGroup& default_group() {
  std::lock_guard<std::mutex> lock(g_mutex);
  MT_CHECK(g_default != nullptr, "distributed: no process group; call distributed::init_process_group() first");
  return *g_default;
}

void destroy_process_group() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_default.reset();
}

int rank() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_default ? g_default->rank() : 0;
}

int world_size() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_default ? g_default->world_size() : 1;
}

}  // namespace mixtrain::distributed
