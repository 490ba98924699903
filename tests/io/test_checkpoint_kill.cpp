// kill -9 during checkpoint writes: a child process (this test binary, re-run in writer mode)
// saves versions 1, 2, 3, ... of a checkpoint back to back; the parent kills it with SIGKILL at
// random times. After every kill the checkpoint loads as one complete version (never older than
// the last one seen, every tensor from the same version), and the next start (a load) leaves no
// stale temporary. Loads while the writer runs either succeed the same way or say that a save
// replaced the checkpoint meanwhile. Bounded: at most about 25 s, no process left behind.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
namespace fs = std::filesystem;
using mt::Tensor;

namespace {

constexpr const char* kWriterEnv = "MT_KILL_TEST_WRITER_DIR";

// The model of every version: 3 tensors of 256K floats (3 MiB), each filled with the version.
struct Versioned {
  mt::io::NamedTensors model{{"a", mt::zeros({1 << 18})}, {"b", mt::zeros({512, 512})}, {"c", mt::zeros({1 << 18})}};
  mt::optim::SGD opt{std::vector<Tensor>{model[0].second}, mt::optim::SGDOptions(0.1)};
  mt::amp::GradScaler scaler;
  void set(int64_t v) {
    for (auto& [n, t] : model) t.fill_(static_cast<double>(v));
  }
  // The version every tensor holds, or -1 when they disagree (a torn checkpoint).
  int64_t version() const {
    const float v = model[0].second.to_vector<float>()[0];
    for (const auto& [n, t] : model)
      for (float x : t.to_vector<float>())
        if (x != v) return -1;
    return static_cast<int64_t>(v);
  }
};

struct Child {
  pid_t pid = -1;
  ~Child() { stop(); }
  void stop() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      pid = -1;
    }
  }
};

pid_t spawn_writer(const fs::path& dir) {
  // Everything the child needs is built before fork(): between fork and exec only
  // async-signal-safe calls are allowed (other threads may have held the malloc lock).
  std::vector<std::string> env_strings{std::string(kWriterEnv) + "=" + dir.string(), "OMP_NUM_THREADS=1"};
  for (char** e = environ; *e; ++e)
    if (std::string(*e).rfind(kWriterEnv, 0) != 0 && std::string(*e).rfind("OMP_NUM_THREADS=", 0) != 0)
      env_strings.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string filter = "--gtest_filter=CheckpointKill.WriterProcess";
  std::string exe = fs::read_symlink("/proc/self/exe").string();
  char* argv[] = {exe.data(), filter.data(), nullptr};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test, whatever happens to it
    ::execve(argv[0], argv, envp.data());
    ::_exit(127);
  }
  return pid;
}

}  // namespace

// Writer mode only (run by the test below through its environment variable).
TEST(CheckpointKill, WriterProcess) {
  const char* dir = std::getenv(kWriterEnv);
  if (!dir) GTEST_SKIP() << "runs only as the child of CheckpointKill.CheckpointAlwaysLoadsAsOneVersion";
  Versioned w;
  Versioned probe;
  int64_t v = 0;
  try {
    v = mt::io::load_checkpoint(dir, probe.model, probe.opt, probe.scaler);
  } catch (const mt::Error&) {
    v = 0;
  }
  const auto stop = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int64_t k = v + 1; std::chrono::steady_clock::now() < stop; ++k) {
    w.set(k);
    mt::io::save_checkpoint(dir, w.model, w.opt, w.scaler, k);
  }
}

TEST(CheckpointKill, CheckpointAlwaysLoadsAsOneVersion) {
  if (std::getenv(kWriterEnv)) GTEST_SKIP() << "the writer child does not run the parent's test";
  std::string t = (fs::temp_directory_path() / "mt_kill_XXXXXX").string();
  const fs::path root = ::mkdtemp(t.data());
  const fs::path dir = root / "ckpt";
  {
    Versioned first;
    first.set(0);
    mt::io::save_checkpoint(dir.string(), first.model, first.opt, first.scaler, 0);
  }
  std::mt19937 rng(1234);
  int64_t last = 0, kills_mid_save = 0, concurrent_loads = 0, concurrent_refusals = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  int trials = 0;
  for (; trials < 40 && std::chrono::steady_clock::now() < deadline; ++trials) {
    Child child;
    child.pid = spawn_writer(dir);
    ASSERT_GT(child.pid, 0);
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(20 + rng() % 180);
    if (trials == 0) {
      // However slow the machine (a sanitizer build), let the writer finish one save first.
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      for (Versioned r; std::chrono::steady_clock::now() < give_up;) {
        try {
          if (mt::io::load_checkpoint(dir.string(), r.model, r.opt, r.scaler) > 0) break;
        } catch (const mt::Error&) {
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      until = std::chrono::steady_clock::now() + std::chrono::milliseconds(20 + rng() % 180);
    }
    // Load while the writer runs: a complete version, or an error that says a save interfered.
    while (std::chrono::steady_clock::now() < until) {
      Versioned r;
      try {
        const int64_t step = mt::io::load_checkpoint(dir.string(), r.model, r.opt, r.scaler);
        EXPECT_EQ(r.version(), step);
        ++concurrent_loads;
      } catch (const mt::Error& e) {
        const std::string m = e.what();
        ++concurrent_refusals;
        EXPECT_TRUE(m.find("replaced while it was being loaded") != std::string::npos ||
                    m.find("no checkpoint directory") != std::string::npos ||
                    m.find("cannot open") != std::string::npos)
            << m;
      }
    }
    child.stop();  // SIGKILL, at whatever point the writer was
    kills_mid_save += fs::exists(root / "ckpt.mixtrain-tmp");
    Versioned r;
    const int64_t step = mt::io::load_checkpoint(dir.string(), r.model, r.opt, r.scaler);
    EXPECT_EQ(r.version(), step) << "trial " << trials << ": a torn checkpoint";
    EXPECT_GE(step, last) << "trial " << trials << ": went back to an older version";
    last = step;
    // The load was the next start: no stale temporary survives it.
    EXPECT_FALSE(fs::exists(root / "ckpt.mixtrain-tmp")) << "trial " << trials;
  }
  std::printf("kill -9 trials: %d, killed mid-save: %lld, last version: %lld, loads during saves: %lld ok, %lld "
              "refused as concurrent\n",
              trials, static_cast<long long>(kills_mid_save), static_cast<long long>(last),
              static_cast<long long>(concurrent_loads), static_cast<long long>(concurrent_refusals));
  EXPECT_GE(trials, 10);
  EXPECT_GT(last, 0) << "the writer never completed a save";
  EXPECT_GT(kills_mid_save, 0) << "no kill landed during a save";
  fs::remove_all(root);
}
