#pragma once
// `mixtrain launch --rank-batches auto` as `mixtrain train` resolves it: each rank finds, by the
// dry-run fit search of `mixtrain memory --fit`, the largest share of the global batch whose step
// fits its own device's memory; the ranks all-gather those fits, and each rank's share of every
// batch is proportional to its fit. See docs/DISTRIBUTED.md ("Batches sized to each rank's memory").
#include <cstdint>
#include <string>
#include <vector>

#include "memory_predict.h"

namespace mixtrain::cli {

// The environment the launcher sets (any launcher may set them itself).
constexpr const char* kRankBatchesEnv = "MIXTRAIN_RANK_BATCHES";  // "auto"
constexpr const char* kRankMemoryEnv = "MIXTRAIN_RANK_MEMORY";    // this rank's budget: "8GiB", bytes

// This rank's memory budget: $MIXTRAIN_RANK_MEMORY when set, else memory::available_bytes of the
// device; for the CPU, which the host's ranks share, that divided by LOCAL_WORLD_SIZE unless
// MIXTRAIN_MEMORY_LIMIT_MB caps each process on its own.
int64_t rank_memory_budget(Device device, int local_world_size);

struct RankFit {
  int64_t budget_bytes = 0;
  int64_t batch = 0;  // the largest share that fits the budget (0: not even the smallest searched)
};

// Each rank's weight from the gathered fits (their fitting batches), or a mixtrain::Error on
// every rank, naming each rank's fit, when they together hold less than the global batch.
std::vector<double> rank_weights_from_fits(const std::vector<RankFit>& fits, int64_t global_batch);

// With $MIXTRAIN_RANK_BATCHES set under a launcher (world size > 1): joins the process group,
// fits this rank's share of `global_batch` for `query` (its spec.batch_size is ignored) in its
// budget, gathers every rank's fit and returns the weights (rank_weights_from_fits); `report`
// gets one line naming each rank's budget, fit and share. Empty when the variable is not set or
// there is one process. A value other than "auto" (with or without a launcher), or
// $MIXTRAIN_RANK_WEIGHTS beside it, is a UsageError.
std::vector<double> auto_rank_weights(StepQuery query, int64_t global_batch, std::string* report);

}  // namespace mixtrain::cli
