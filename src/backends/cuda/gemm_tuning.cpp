// Times cuBLASLt's candidate algorithms once per GEMM key and remembers the fastest
// (gemm_tuning.h; the file format is backends/gemm_tuning_file.h).
#include "backends/cuda/gemm_tuning.h"

#include <sys/stat.h>

#include <cstdlib>
#include <mutex>

#include "backends/cuda/cuda_check.h"
#include "backends/gemm_tuning_file.h"

namespace mixtrain::backends::cuda {

namespace {

constexpr int kCandidates = 8;
constexpr int kTimedLaunches = 5;
// Another candidate replaces the heuristic's first only when at least this much faster: smaller
// differences are within run-to-run noise, and a stable choice keeps results' rounding stable.
constexpr double kMinGain = 0.03;

struct TuningState {
  std::mutex mutex;
  bool initialised = false;
  bool enabled = true;
  std::string path;  // empty: no file
  GemmTuningTable table;
};

TuningState& state() {
  static TuningState* s = new TuningState();  // outlives every GEMM, static destructors included
  return *s;
}

void initialise(TuningState& s, DeviceContext& ctx) {
  if (s.initialised) return;
  if (const char* env = std::getenv("MIXTRAIN_GEMM_TUNING")) {
    const std::string v = env;
    MT_CHECK(v == "0" || v == "1", "MIXTRAIN_GEMM_TUNING must be 0 or 1, got '", v, "'");
    s.enabled = v == "1";
  }
  if (const char* f = std::getenv("MIXTRAIN_GEMM_TUNING_FILE"); f && *f) s.path = f;
  s.table.device = ctx.props.name;
  s.table.library_version = static_cast<int64_t>(cublasLtGetVersion());
  struct stat st {};
  if (!s.path.empty() && ::stat(s.path.c_str(), &st) == 0) {
    // A bad file throws (naming it) before anything of it is used. A table of another device
    // model or cuBLASLt version is set aside: its choices index other candidate lists. It is
    // replaced at the next save.
    GemmTuningTable loaded = read_gemm_tuning(s.path);
    if (loaded.device == s.table.device && loaded.library_version == s.table.library_version)
      s.table.choices = std::move(loaded.choices);
  }
  s.initialised = true;
}

// Destroys the timing events on every path out of choose_gemm_algorithm.
struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventPair() {
    MT_CUDA_CHECK(cudaEventCreate(&start));
    MT_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~EventPair() {
    // Not checked: a destructor must not throw, and a failure here leaks one event at most.
    if (start) (void)cudaEventDestroy(start);
    if (stop) (void)cudaEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
};

// Milliseconds for kTimedLaunches launches of `algo`, or a negative number when it fails to launch.
float time_candidate(DeviceContext& ctx, EventPair& ev, const cublasLtMatmulAlgo_t& algo,
                     const std::function<cublasStatus_t(const cublasLtMatmulAlgo_t&)>& launch) {
  // A candidate whose kernel failed to launch may leave the runtime's last error set; cleared, so
  // the next kernel's launch check does not report it as its own.
  auto failed = [] {
    (void)cudaGetLastError();
    return -1.0f;
  };
  if (launch(algo) != CUBLAS_STATUS_SUCCESS) return failed();  // the warm-up, and a check that it runs
  MT_CUDA_CHECK(cudaEventRecord(ev.start, ctx.stream));
  for (int i = 0; i < kTimedLaunches; ++i)
    if (launch(algo) != CUBLAS_STATUS_SUCCESS) return failed();
  MT_CUDA_CHECK(cudaEventRecord(ev.stop, ctx.stream));
  MT_CUDA_CHECK(cudaEventSynchronize(ev.stop));
  float ms = 0.0f;
  MT_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start, ev.stop));
  return ms;
}

}  // namespace

int gemm_candidate_count(DeviceContext& ctx) {
  TuningState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  initialise(s, ctx);
  return s.enabled ? kCandidates : 1;
}

void reset_gemm_tuning() {
  TuningState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.initialised = false;
  s.enabled = true;
  s.path.clear();
  s.table = GemmTuningTable{};
}

int choose_gemm_algorithm(DeviceContext& ctx, const std::string& key,
                          const std::vector<cublasLtMatmulHeuristicResult_t>& candidates,
                          const std::function<cublasStatus_t(const cublasLtMatmulAlgo_t&)>& launch) {
  if (candidates.size() <= 1) return 0;
  TuningState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  initialise(s, ctx);
  if (const auto it = s.table.choices.find(key);
      it != s.table.choices.end() && it->second < static_cast<int>(candidates.size()))
    return it->second;
  EventPair ev;
  int best = 0;
  float best_ms = -1.0f, first_ms = -1.0f;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (candidates[i].state != CUBLAS_STATUS_SUCCESS) continue;
    const float ms = time_candidate(ctx, ev, candidates[i].algo, launch);
    if (ms < 0.0f) continue;
    if (i == 0) first_ms = ms;
    if (best_ms < 0.0f || ms < best_ms) best_ms = ms, best = static_cast<int>(i);
  }
  if (best_ms < 0.0f) return 0;  // none ran: nothing measured, nothing to remember (the launch will say why)
  if (first_ms >= 0.0f && best != 0 && best_ms > first_ms * (1.0 - kMinGain)) best = 0;
  s.table.choices[key] = best;
  if (!s.path.empty()) write_gemm_tuning(s.path, s.table);
  return best;
}

}  // namespace mixtrain::backends::cuda
