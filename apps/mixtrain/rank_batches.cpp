// Per-rank batches sized to each rank's memory (rank_batches.h).
#include "rank_batches.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <sstream>

#include <mixtrain/memory/device_memory.h>

#include "common/cli.h"

namespace mixtrain::cli {

int64_t rank_memory_budget(Device device, int local_world_size) {
  if (const char* v = std::getenv(kRankMemoryEnv)) return parse_byte_size(v, kRankMemoryEnv);
  const int64_t available = memory::available_bytes(device);
  // One host's ranks draw on the same MemAvailable; an allocator limit is each process's own.
  if (device.is_cpu() && memory::stats(device).limit_bytes < 0) return available / std::max(1, local_world_size);
  return available;
}

std::vector<double> rank_weights_from_fits(const std::vector<RankFit>& fits, int64_t global_batch) {
  int64_t total = 0;
  bool none_fits = false;
  std::ostringstream each;
  for (size_t r = 0; r < fits.size(); ++r) {
    total += fits[r].batch;
    none_fits = none_fits || fits[r].batch == 0;
    each << (r ? ", " : "") << "rank " << r << " fits " << fits[r].batch << " in " << memory::format_bytes(fits[r].budget_bytes);
  }
  MT_CHECK(!none_fits && total >= global_batch, "--rank-batches auto: the global batch of ", global_batch,
           " samples does not fit the ranks' memory (", each.str(), "; ", total, " together",
           none_fits ? "; a rank that fits 0 cannot hold even 2 samples" : "",
           "); lower --batch-size or give the ranks more memory");
  std::vector<double> weights;
  for (const RankFit& f : fits) weights.push_back(static_cast<double>(f.batch));
  return weights;
}

std::vector<double> auto_rank_weights(StepQuery query, int64_t global_batch, std::string* report) {
  const char* mode = std::getenv(kRankBatchesEnv);
  if (!mode) return {};
  // Checked with or without a launcher: a typo is an error, not a setting silently ignored.
  if (std::string(mode) != "auto")
    throw examples::cli::UsageError(std::string(kRankBatchesEnv) + " (--rank-batches) expects auto, got '" + mode + "'");
  const distributed::LaunchEnv env = distributed::read_launch_env();
  if (env.world_size <= 1) return {};  // one process: its batch is the global batch
  if (std::getenv("MIXTRAIN_RANK_WEIGHTS"))
    throw examples::cli::UsageError("--rank-batches auto and --rank-weights both set each rank's share; give one");
  MT_CHECK(global_batch >= 2, "--rank-batches auto: the global batch must be at least 2 samples (the smallest ",
           "share the search tries), got ", global_batch);

  // A bad budget or a failed search still joins the gather (as a fit of -1 or 0), so every rank
  // ends with the same error instead of the others waiting for it until the timeout.
  RankFit mine;
  std::exception_ptr failure;
  try {
    // One GPU per rank, the one its LOCAL_RANK names, as the NCCL group picks it.
    const Device device = query.target.is_cuda() ? Device::cuda(env.local_rank) : query.target;
    mine.budget_bytes = rank_memory_budget(device, env.local_world_size);
    query.global_batch_size = global_batch;
    const FitResult fit = fit_batch(query, mine.budget_bytes, global_batch);
    mine.batch = fit.fits ? fit.best.batch_size : 0;
  } catch (const std::exception&) {
    failure = std::current_exception();
    mine.batch = -1;
  }
  if (!distributed::is_initialized()) distributed::init_process_group();
  const Tensor own = from_vector(std::vector<int64_t>{mine.budget_bytes, mine.batch}, {2});
  const std::vector<Tensor> gathered = distributed::default_group().all_gather(own);
  std::vector<RankFit> fits;
  for (const Tensor& t : gathered) {
    const std::vector<int64_t> v = t.to_vector<int64_t>();
    fits.push_back({v[0], v[1]});
  }
  if (failure) std::rethrow_exception(failure);
  for (size_t r = 0; r < fits.size(); ++r)
    MT_CHECK(fits[r].batch >= 0, "--rank-batches auto: rank ", r, " could not size its batch (its own error says why)");
  std::vector<double> weights = rank_weights_from_fits(fits, global_batch);
  if (report) {
    const std::vector<int64_t> shares = distributed::DistributedSampler::split(global_batch, weights);
    std::ostringstream os;
    os << "rank batches (auto, by dry run): global batch " << global_batch;
    for (size_t r = 0; r < fits.size(); ++r)
      os << "; rank " << r << ": " << memory::format_bytes(fits[r].budget_bytes) << " fits " << fits[r].batch << ", takes "
         << shares[r];
    *report = os.str();
  }
  return weights;
}

}  // namespace mixtrain::cli
