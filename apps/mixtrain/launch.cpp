// `mixtrain launch --nproc N [--nnodes H --node-rank R --master-addr A --master-port P]
// [--rank-weights w0,w1,...|adaptive | --rank-batches auto [--rank-memory S0,...]]
// [--max-restarts K | --elastic | --join] -- PROGRAM ARGS...`: starts this host's N ranks of
// PROGRAM with the launch contract in their environment (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; on one host also a fresh file store in
// MIXTRAIN_STORE; OMP_NUM_THREADS = this host's cores / N unless set), prefixes each output line
// with its rank, forwards the signals that would end it, and when one rank fails stops the others and returns its
// exit code, or restarts them all (--max-restarts, with MIXTRAIN_RESTART_COUNT), or lets them go on
// (--elastic: this launcher serves the job's store; --join adds ranks to a running one). Killed
// outright, it takes its ranks with it (each rank has PR_SET_PDEATHSIG, and a guardian process
// kills their process groups and removes the temporary directory).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <mixtrain/distributed/process_group.h>
#include <mixtrain/distributed/store_server.h>

#include "commands.h"
#include "common/cli.h"
#include "launch_guardian.h"
#include "launch_ranks.h"
#include "launch_supervisor.h"
#include "memory_predict.h"

extern char** environ;

namespace mixtrain::cli {

namespace {

// The launcher's temporary directory, removed however run_launch ends (an error included; a
// launcher killed outright leaves that to its guardian).
struct LaunchDir {
  std::string path;
  LaunchDir() {
    const char* tmp = std::getenv("TMPDIR");
    path = std::string(tmp && *tmp ? tmp : "/tmp") + "/mixtrain-launch-XXXXXX";
    if (!mkdtemp(path.data()))
      throw std::runtime_error("launch: cannot create a temporary directory " + path + ": " + std::strerror(errno));
  }
  ~LaunchDir() { remove(); }
  void remove() const {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  LaunchDir(const LaunchDir&) = delete;
  LaunchDir& operator=(const LaunchDir&) = delete;
};

// The launcher's signal handling for as long as it supervises.
struct LauncherSignals {
  LauncherSignals() { install_launcher_signals(); }
  ~LauncherSignals() { remove_launcher_signals(); }
  LauncherSignals(const LauncherSignals&) = delete;
  LauncherSignals& operator=(const LauncherSignals&) = delete;
};

}  // namespace

int run_launch(const std::vector<std::string>& argv) {
  namespace flags = examples::cli;
  // Everything after `--` belongs to the program, --help included.
  const auto split = std::find(argv.begin(), argv.end(), "--");
  int nproc = 0, nnodes = 1, node_rank = 0, master_port = 0;
  std::string weights, master_addr, run_id;
  const auto app = flags::make_app("mixtrain launch", "Runs this host's share of PROGRAM's data-parallel ranks: "
                                                      "mixtrain launch --nproc N [flags] -- PROGRAM [ARGS...]");
  app->add_option("--nproc,--nproc-per-node", nproc, "ranks to start on this host")
      ->required()
      ->check(flags::integer_in(1, 1024))
      ->type_name("N");
  app->add_option("--nnodes", nnodes, "hosts in the job; run the same command on each, with its --node-rank")
      ->check(flags::integer_in(1, 65536))
      ->type_name("H");
  app->add_option("--node-rank", node_rank, "this host's index, 0 to H-1 (host 0 runs rank 0, which serves the "
                                            "rendezvous store)")
      ->check(flags::integer_in(0, 65535))
      ->type_name("R");
  app->add_option("--master-addr", master_addr, "address of host 0 that every host reaches (the rendezvous)")
      ->type_name("A")
      ->default_str("127.0.0.1 on one host");
  app->add_option("--master-port", master_port, "port of the rendezvous store that rank 0 serves")
      ->check(flags::integer_in(1, 65535))
      ->type_name("P")
      ->default_str("29500 across hosts");
  app->add_option("--run-id", run_id, "an id of this job, the same on every host (MIXTRAIN_RUN_ID): a host "
                                      "started for another job is refused")
      ->type_name("ID")
      ->default_str("none");
  app->add_option("--rank-weights", weights,
                  "each rank's share of every batch, one weight per rank of the job; adaptive: start even and "
                  "follow each rank's measured speed (mixtrain train)")
      ->type_name("W0,W1,...")
      ->default_str("even");
  int max_restarts = 0;
  bool elastic = false, join = false;
  app->add_option("--max-restarts", max_restarts,
                  "when a rank fails, restart every rank of this host up to K times; the trainers resume from "
                  "their last checkpoint (torchrun's --max-restarts)")
      ->check(flags::integer_in(0, 1000000))
      ->type_name("K")
      ->default_str("0");
  app->add_flag("--elastic", elastic,
                "when a rank dies or hangs, the others go on without it, re-splitting each global batch (the "
                "trainers redo the interrupted step); this launcher serves the job's store");
  app->add_flag("--join", join,
                "start this host's ranks as replacements joining the running --elastic job whose store is at "
                "--master-addr:--master-port; they receive the state from a rank of the job");
  std::string rank_batches, rank_memory;
  app->add_option("--rank-batches", rank_batches,
                  "auto: each rank's share in proportion to the largest batch that fits its own memory, by dry run "
                  "(mixtrain train)")
      ->check(flags::one_of({"auto"}))
      ->type_name("auto")
      ->default_str("by --rank-weights");
  app->add_option("--rank-memory", rank_memory,
                  "with --rank-batches auto: the memory each of this host's ranks may plan for (one size for all, "
                  "or one per rank) instead of its device's free memory")
      ->type_name("S0,S1,...")
      ->default_str("free memory");
  if (!flags::parse(*app, std::vector<std::string>(argv.begin(), split), std::cout)) return 0;
  if (node_rank >= nnodes)
    throw flags::UsageError("launch: --node-rank " + std::to_string(node_rank) + " is not below --nnodes " +
                            std::to_string(nnodes));
  if (nnodes > 1 && master_addr.empty())
    throw flags::UsageError("launch: --nnodes " + std::to_string(nnodes) + " needs --master-addr, the address of "
                            "host 0 (--node-rank 0) that every host reaches");
  if (static_cast<int64_t>(nnodes) * nproc > distributed::kMaxWorldSize)
    throw flags::UsageError("launch: --nnodes x --nproc is more than " + std::to_string(distributed::kMaxWorldSize) +
                            " ranks (mixtrain's limit)");
  if (join) elastic = true;
  if (elastic && max_restarts > 0)
    throw flags::UsageError("launch: --max-restarts restarts every rank after a failure, --elastic goes on with "
                            "the ranks left; give one");
  if (join && master_port == 0)
    throw flags::UsageError("launch: --join needs --master-port, the port of the running job's store (its launcher "
                            "printed it)");
  if (join && (nnodes > 1 || node_rank > 0))
    throw flags::UsageError("launch: --join starts ranks that the running job numbers itself; leave out --nnodes "
                            "and --node-rank");
  if (elastic && nnodes > 1 && master_port == 0)
    throw flags::UsageError("launch: --elastic across hosts needs --master-port (host 0's launcher serves the "
                            "store there)");
  if (join && weights == "adaptive")
    throw flags::UsageError("launch: --join takes one weight for its ranks' share (or none: 1); the running job's "
                            "--rank-weights adaptive then follows their speed too");
  if (elastic && !rank_batches.empty())
    throw flags::UsageError("launch: --rank-batches auto sizes a fixed set of ranks; with --elastic give "
                            "--rank-weights");
  const int world = nnodes * nproc;
  // Several hosts (or an address/port given): rank 0 serves the store at --master-addr:--master-port.
  const bool tcp_store = nnodes > 1 || !master_addr.empty() || master_port != 0;
  if (master_addr.empty()) master_addr = "127.0.0.1";
  if (!rank_batches.empty() && !weights.empty())
    throw flags::UsageError("launch: --rank-batches auto and --rank-weights both set each rank's share; give one");
  if (!rank_memory.empty() && rank_batches.empty())
    throw flags::UsageError("launch: --rank-memory sizes the batches of --rank-batches auto; add it");
  std::vector<std::string> memory_of_rank;
  if (!rank_memory.empty()) {
    std::stringstream list(rank_memory);
    for (std::string item; std::getline(list, item, ',');) {
      parse_byte_size(item, "--rank-memory");  // checked here, read by each rank
      memory_of_rank.push_back(item);
    }
    if (rank_memory.back() == ',') parse_byte_size("", "--rank-memory");
    if (memory_of_rank.size() == 1) memory_of_rank.assign(static_cast<size_t>(nproc), memory_of_rank[0]);
    if (memory_of_rank.size() != static_cast<size_t>(nproc))
      throw flags::UsageError("launch: --rank-memory has " + std::to_string(memory_of_rank.size()) +
                              " sizes for " + std::to_string(nproc) + " ranks (give one, or one per rank)");
  }
  if (split == argv.end() || split + 1 == argv.end())
    throw std::runtime_error("launch: expected -- PROGRAM [ARGS...]");
  const std::vector<std::string> program(split + 1, argv.end());
  if (!weights.empty() && weights != "adaptive") {
    // The ranks apply the same rule; checked here so that a bad list stops before any rank starts.
    try {
      distributed::parse_rank_weights(weights, join ? 1 : world);
    } catch (const std::exception& e) {
      throw flags::UsageError(std::string("launch: --rank-weights: ") + e.what());
    }
  }

  SupervisorOptions supervision;
  supervision.elastic = elastic;
  supervision.max_restarts = max_restarts;
  supervision.ranks_per_host = nproc;
  supervision.timeout = job_timeout();
  // A write to a pipe or socket whose reader is gone (the guardian, a client of the store) is an
  // error the launcher reports, not its end.
  signal(SIGPIPE, SIG_IGN);
  const LaunchDir launch_dir;
  const std::string& dir = launch_dir.path;
  LaunchGuardian guardian(dir);
  const LauncherSignals signals;  // after the guardian's fork: it keeps the default handlers
  // An elastic job's store outlives every rank: host 0's launcher serves it (a joiner's launcher
  // connects to it), at --master-port or, on one host without one, a free port it reports.
  // The job's store token (one host: made here unless set; several: the user's, the same on each).
  const std::string token_file = !join && nnodes == 1 ? distributed::make_job_store_token(dir) : "";
  std::unique_ptr<distributed::TcpStoreServer> store_server;
  if (elastic && !join && node_rank == 0)
    store_server = std::make_unique<distributed::TcpStoreServer>(
        master_port, distributed::StoreServerOptions::for_job(master_addr, nnodes == 1));
  const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  const bool user_threads = std::getenv("OMP_NUM_THREADS") != nullptr;
  const std::string threads = std::to_string(std::max(1L, cores / nproc));
  const std::string port = std::to_string(
      store_server ? store_server->port()
                   : (tcp_store ? (master_port ? master_port : 29500) : 20000 + (getpid() % 20000)));
  if (store_server)
    std::cout << "mixtrain launch: elastic job; its store is tcp://" << master_addr << ":" << port
              << " (served by this launcher; `"
              << (token_file.empty() ? "" : "MIXTRAIN_STORE_TOKEN_FILE=" + token_file + " ")
              << "mixtrain launch --join --master-addr " << master_addr << " --master-port " << port
              << " --nproc N -- PROGRAM` adds ranks)" << std::endl;

  // Rank r of this host: its launch contract and the job's settings, then the launcher's own
  // environment (what is set here wins).
  auto environment = [&](int r, int restart) {
    // A joiner's RANK and WORLD_SIZE are placeholders (a non-zero rank of a job of several) until
    // the running job admits it and numbers it.
    const int rank = join ? r + 1 : node_rank * nproc + r;
    std::vector<std::string> env = {"RANK=" + std::to_string(rank),
                                    "WORLD_SIZE=" + std::to_string(join ? nproc + 1 : world),
                                    "LOCAL_RANK=" + std::to_string(r),
                                    "LOCAL_WORLD_SIZE=" + std::to_string(nproc),
                                    "GROUP_RANK=" + std::to_string(node_rank),
                                    "MASTER_ADDR=" + master_addr,
                                    "MASTER_PORT=" + port,
                                    "MIXTRAIN_RESTART_COUNT=" + std::to_string(restart),
                                    "TORCHELASTIC_RESTART_COUNT=" + std::to_string(restart)};
    if (elastic) {
      env.push_back("MIXTRAIN_ELASTIC=1");
      env.push_back("MIXTRAIN_STORE=tcp://" + master_addr + ":" + port);
      env.push_back("MIXTRAIN_STORE_SERVER=launcher");
      if (join) env.push_back("MIXTRAIN_ELASTIC_JOIN=1");
    } else if (!tcp_store) {
      // One host: a file store of this job's (and this restart's) own. Several: the store rank 0
      // serves at MASTER_ADDR.
      env.push_back("MIXTRAIN_STORE=file:" + dir + "/store-" + std::to_string(restart));
    }
    if (!run_id.empty()) env.push_back("MIXTRAIN_RUN_ID=" + run_id);
    if (!user_threads) env.push_back("OMP_NUM_THREADS=" + threads);
    if (!weights.empty())
      env.push_back((join ? std::string("MIXTRAIN_ELASTIC_WEIGHT") : std::string(distributed::kRankWeightsEnv)) + "=" + weights);
    if (!rank_batches.empty()) env.push_back(std::string(distributed::kRankBatchesEnv) + "=" + rank_batches);
    if (!memory_of_rank.empty()) env.push_back(std::string(distributed::kRankMemoryEnv) + "=" + memory_of_rank[static_cast<size_t>(r)]);
    for (char** e = environ; *e; ++e) {
      const std::string s = *e;
      const std::string key = s.substr(0, s.find('=') + 1);
      bool ours = false;
      for (const auto& x : env) ours = ours || x.compare(0, key.size(), key) == 0;
      if (!ours) env.push_back(s);
    }
    return env;
  };
  RankProcesses ranks(program, guardian);
  const int result = supervise(ranks, guardian, supervision, [&](int restart) {
    for (int r = 0; r < nproc; ++r) ranks.start(join ? r + 1 : node_rank * nproc + r, environment(r, restart));
  });
  ranks.clear();
  store_server.reset();
  launch_dir.remove();  // before the guardian is told the launcher finished
  guardian.finish();
  return result;
}

}  // namespace mixtrain::cli
