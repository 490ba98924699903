#pragma once
// How the ranks share each global batch of data-parallel training: evenly, by fixed weights, by
// what each rank's memory holds (sized by dry run), or following each rank's measured speed. The
// launcher asks for one (`mixtrain launch --rank-weights W0,W1,...|adaptive`, `--rank-batches auto
// [--rank-memory S0,...]`) through the environment (MIXTRAIN_RANK_WEIGHTS, MIXTRAIN_RANK_BATCHES,
// MIXTRAIN_RANK_MEMORY; any launcher may set them). A process group takes them from the
// environment when it is made (ProcessGroup::rank_shares); DistributedSampler splits each batch by
// the group's shares, and DistributedDataParallel moves adaptive shares after each step, so a
// trainer on DDP and the sampler follows the launcher with no code of its own.
// docs/DISTRIBUTED.md ("Uneven per-rank batches" and after).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mixtrain/base/device.h"

namespace mixtrain::distributed {

constexpr const char* kRankWeightsEnv = "MIXTRAIN_RANK_WEIGHTS";  // "w0,w1,..." or "adaptive"
constexpr const char* kRankBatchesEnv = "MIXTRAIN_RANK_BATCHES";  // "auto"
constexpr const char* kRankMemoryEnv = "MIXTRAIN_RANK_MEMORY";    // this rank's budget: "8GiB", bytes

struct RankShares {
  std::vector<double> weights;  // one positive weight per rank; empty: even
  // DistributedDataParallel moves the weights toward equal compute times as training goes
  // (RankBalancer), starting from `weights` (or even).
  bool adaptive = false;
  // MIXTRAIN_RANK_BATCHES=auto: the weights are each rank's largest fitting share, which
  // fit_rank_shares finds by dry run (DistributedSampler does it given a dry_run_step); until
  // then there are none.
  bool by_memory = false;
  int64_t changes = 0;  // how many times the adaptive weights moved

  // The weights, or one per rank when even.
  std::vector<double> weights_for(int world_size) const;
};

// The one rule for per-rank weights, wherever they come from: one positive, finite number per
// rank, whose sum is finite. An Error otherwise, its message starting with `source` (what gave
// the weights).
void check_rank_weights(const std::vector<double>& weights, int world_size, const std::string& source);

// "3,1" -> {3, 1}: one positive, finite weight per rank whose sum is finite; an Error quoting the
// text otherwise.
std::vector<double> parse_rank_weights(const std::string& text, int world_size);

// The shares the launcher asked for a job of world_size ranks: MIXTRAIN_RANK_WEIGHTS (weights, or
// adaptive) or MIXTRAIN_RANK_BATCHES=auto (by_memory); neither set: even. A malformed value, a
// count other than world_size, or both variables set is an Error naming the variable or quoting
// the weights. A process joining an elastic job ($MIXTRAIN_ELASTIC_JOIN=1) brings its own weight
// ($MIXTRAIN_ELASTIC_WEIGHT, ElasticAgent's), so fixed weights are not its to take.
RankShares launch_rank_shares(int world_size);

// This rank's memory budget for MIXTRAIN_RANK_BATCHES=auto: $MIXTRAIN_RANK_MEMORY when set (an
// Error naming it when it does not parse), else memory::available_bytes of the device; for the
// CPU, which the host's ranks share, that divided by local_world_size unless
// MIXTRAIN_MEMORY_LIMIT_MB caps each process on its own.
int64_t rank_memory_budget(Device device, int local_world_size);

struct RankFit {
  int64_t budget_bytes = 0;
  int64_t batch = 0;  // the largest share that fits the budget (0: not even the smallest searched)
};

// Each rank's weight from the gathered fits (their fitting batches), or an Error naming each
// rank's fit and budget when together they hold less than the global batch or one fits nothing.
std::vector<double> rank_weights_from_fits(const std::vector<RankFit>& fits, int64_t global_batch);

// MIXTRAIN_RANK_BATCHES=auto, resolved: this rank's budget (rank_memory_budget of `device`; a
// CUDA device is the rank's own GPU, LOCAL_RANK), its largest share of global_batch that fits
// (fit(budget): 0 when not even 2 samples fit), gathered over the default group (initialised
// here when it is not yet), and the shares proportional to the fits, which become the group's
// (rank_shares) and are returned. Every rank ends with the same Error when the fits together hold
// less than global_batch, or when a rank's own search failed (that rank's error says why; the
// others name it). `report`, when given, gets one line naming every rank's budget, fit and share.
std::vector<double> fit_rank_shares(Device device, int64_t global_batch,
                                    const std::function<int64_t(int64_t budget_bytes)>& fit,
                                    std::string* report = nullptr);

}  // namespace mixtrain::distributed
