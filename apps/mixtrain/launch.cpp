// `mixtrain launch --nproc N [--nnodes H --node-rank R --master-addr A --master-port P]
// [--rank-weights w0,w1,...|adaptive | --rank-batches auto [--rank-memory S0,...]] -- PROGRAM
// ARGS...`: starts this host's N ranks of PROGRAM with the launch contract in their environment
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; on one host also a
// fresh file store in MIXTRAIN_STORE; OMP_NUM_THREADS = this host's cores / N unless set),
// prefixes each output line with its rank, forwards SIGINT/SIGTERM, and when one rank fails stops
// the others and returns its exit code. Killed outright, it takes its ranks with it (each rank
// has PR_SET_PDEATHSIG, and a guardian process kills their process groups and removes the
// temporary directory).
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

#include "commands.h"
#include "common/cli.h"
#include "launch_guardian.h"
#include "memory_predict.h"

extern char** environ;

namespace mixtrain::cli {

namespace {

int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  const char c = static_cast<char>(sig);
  [[maybe_unused]] const ssize_t n = write(g_signal_pipe[1], &c, 1);
}

struct Child {
  pid_t pid = -1;
  int out = -1;  // read end of the rank's stdout+stderr
  std::string pending;
  int status = 0;
  bool running = false;
  int rank = 0;  // in the whole job
};

void flush_lines(Child& c, int rank, bool all) {
  size_t start = 0;
  for (size_t nl; (nl = c.pending.find('\n', start)) != std::string::npos; start = nl + 1)
    std::cout << "[rank " << rank << "] " << c.pending.substr(start, nl - start + 1);
  c.pending.erase(0, start);
  if (all && !c.pending.empty()) {
    std::cout << "[rank " << rank << "] " << c.pending << "\n";
    c.pending.clear();
  }
  std::cout.flush();
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

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
  if (static_cast<int64_t>(nnodes) * nproc > (1 << 20))
    throw flags::UsageError("launch: --nnodes x --nproc is more than 2^20 ranks");
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
      distributed::parse_rank_weights(weights, world);
    } catch (const std::exception& e) {
      throw flags::UsageError(std::string("launch: --rank-weights: ") + e.what());
    }
  }

  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/mixtrain-launch-XXXXXX";
  if (!mkdtemp(tmpl.data()))
    throw std::runtime_error("launch: cannot create a temporary directory " + tmpl + ": " + std::strerror(errno));
  const std::string dir = tmpl;
  LaunchGuardian guardian(dir);
  const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  const bool user_threads = std::getenv("OMP_NUM_THREADS") != nullptr;
  const std::string threads = std::to_string(std::max(1L, cores / nproc));
  const std::string port = std::to_string(tcp_store ? (master_port ? master_port : 29500) : 20000 + (getpid() % 20000));
  const pid_t launcher = getpid();

  if (pipe(g_signal_pipe) != 0) throw std::runtime_error("launch: pipe failed");
  fcntl(g_signal_pipe[0], F_SETFL, O_NONBLOCK);
  fcntl(g_signal_pipe[1], F_SETFL, O_NONBLOCK);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  std::vector<Child> children(static_cast<size_t>(nproc));
  for (int r = 0; r < nproc; ++r) {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("launch: pipe failed");
    std::vector<std::string> env = {"RANK=" + std::to_string(node_rank * nproc + r),
                                    "WORLD_SIZE=" + std::to_string(world),
                                    "LOCAL_RANK=" + std::to_string(r),
                                    "LOCAL_WORLD_SIZE=" + std::to_string(nproc),
                                    "GROUP_RANK=" + std::to_string(node_rank),
                                    "MASTER_ADDR=" + master_addr,
                                    "MASTER_PORT=" + port};
    // One host: a file store of this job's own. Several: the store rank 0 serves at MASTER_ADDR.
    if (!tcp_store) env.push_back("MIXTRAIN_STORE=file:" + dir + "/store");
    if (!run_id.empty()) env.push_back("MIXTRAIN_RUN_ID=" + run_id);
    if (!user_threads) env.push_back("OMP_NUM_THREADS=" + threads);
    if (!weights.empty()) env.push_back(std::string(distributed::kRankWeightsEnv) + "=" + weights);
    if (!rank_batches.empty()) env.push_back(std::string(distributed::kRankBatchesEnv) + "=" + rank_batches);
    if (!memory_of_rank.empty()) env.push_back(std::string(distributed::kRankMemoryEnv) + "=" + memory_of_rank[static_cast<size_t>(r)]);
    for (char** e = environ; *e; ++e) {
      const std::string s = *e;
      const std::string key = s.substr(0, s.find('=') + 1);
      bool ours = false;
      for (const auto& x : env) ours = ours || x.compare(0, key.size(), key) == 0;
      if (!ours) env.push_back(s);
    }
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("launch: fork failed");
    if (pid == 0) {
      setpgid(0, 0);  // its own process group: a signal reaches the rank's children too
      // Killed with the launcher, however the launcher ends (the guardian gets its children).
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != launcher) _exit(1);
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      close(fds[0]);
      close(fds[1]);
      std::vector<char*> envp, args;
      for (auto& s : env) envp.push_back(s.data());
      envp.push_back(nullptr);
      std::vector<std::string> prog = program;
      for (auto& s : prog) args.push_back(s.data());
      args.push_back(nullptr);
      environ = envp.data();
      execvp(args[0], args.data());
      std::fprintf(stderr, "mixtrain launch: cannot run %s: %s\n", args[0], std::strerror(errno));
      _exit(127);
    }
    setpgid(pid, pid);
    guardian.watch(pid);
    close(fds[1]);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    children[static_cast<size_t>(r)] = {pid, fds[0], "", 0, true, node_rank * nproc + r};
  }

  int result = 0;
  int failed_rank = -1;
  bool stopping = false;
  auto stop_deadline = std::chrono::steady_clock::time_point::max();
  auto signal_all = [&](int sig) {
    for (auto& c : children)
      if (c.running) kill(-c.pid, sig);
  };
  for (;;) {
    std::vector<pollfd> fds;
    for (auto& c : children)
      if (c.out >= 0) fds.push_back({c.out, POLLIN, 0});
    fds.push_back({g_signal_pipe[0], POLLIN, 0});
    poll(fds.data(), fds.size(), 50);
    char sig = 0;
    while (read(g_signal_pipe[0], &sig, 1) == 1) {
      // Forwarded; the ranks decide how to stop. A second signal ends them.
      signal_all(stopping ? SIGKILL : sig);
      if (!stopping) stopping = true, stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      if (result == 0) result = 128 + sig;
    }
    for (int r = 0; r < nproc; ++r) {
      Child& c = children[static_cast<size_t>(r)];
      if (c.out < 0) continue;
      char buf[4096];
      ssize_t n;
      while ((n = read(c.out, buf, sizeof(buf))) > 0) c.pending.append(buf, static_cast<size_t>(n));
      flush_lines(c, c.rank, false);
      if (n == 0) {
        flush_lines(c, c.rank, true);
        close(c.out);
        c.out = -1;
      }
    }
    bool any_running = false;
    for (int r = 0; r < nproc; ++r) {
      Child& c = children[static_cast<size_t>(r)];
      if (!c.running) continue;
      if (waitpid(c.pid, &c.status, WNOHANG) == c.pid) {
        c.running = false;
        const int code = exit_code(c.status);
        if (code != 0 && failed_rank < 0 && !stopping) {
          failed_rank = c.rank;
          result = code;
          std::cerr << "mixtrain launch: rank " << c.rank << " exited with code " << code << "; stopping the others\n";
          stopping = true;
          signal_all(SIGTERM);
          stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        }
      } else {
        any_running = true;
      }
    }
    if (stopping && std::chrono::steady_clock::now() > stop_deadline) signal_all(SIGKILL);
    bool open = false;
    for (auto& c : children) open = open || c.out >= 0;
    if (!any_running && !open) break;
    if (!any_running && open) {
      // A rank's child process may hold the pipe; stop reading after the ranks exit.
      for (auto& c : children)
        if (c.out >= 0) close(c.out), c.out = -1;
    }
  }
  // Whatever a rank left in its process group goes with it.
  for (auto& c : children) kill(-c.pid, SIGKILL);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  guardian.finish();
  close(g_signal_pipe[0]);
  close(g_signal_pipe[1]);
  return result;
}

}  // namespace mixtrain::cli
