// The launcher's per-rank shares (rank_shares.h): read from the environment, and
// MIXTRAIN_RANK_BATCHES=auto resolved by each rank's dry-run fit, gathered over the group.
#include "mixtrain/distributed/rank_shares.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <numeric>
#include <sstream>

#include "mixtrain/base/error.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/distributed/process_group.h"
#include "mixtrain/distributed/sampler.h"
#include "mixtrain/memory/allocator.h"
#include "mixtrain/memory/device_memory.h"

namespace mixtrain::distributed {

std::vector<double> RankShares::weights_for(int world_size) const {
  return weights.empty() ? std::vector<double>(static_cast<size_t>(world_size), 1.0) : weights;
}

void check_rank_weights(const std::vector<double>& weights, int world_size, const std::string& source) {
  for (const double w : weights)
    MT_CHECK(w > 0 && std::isfinite(w), source, ": ", w, " is not a positive number");
  MT_CHECK(static_cast<int>(weights.size()) == world_size, source, " give ", weights.size(), " values for ",
           world_size, " ranks");
  // Each share is n * w / total: the total must be a finite number too (1e308,1e308 is not).
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  MT_CHECK(std::isfinite(total), source, ": the weights add up to ", total,
           ", beyond a double; scale them down (only their ratios matter)");
}

std::vector<double> parse_rank_weights(const std::string& text, int world_size) {
  std::vector<double> w;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    MT_CHECK(!item.empty() && end && *end == '\0', "rank weights \"", text, "\": '", item,
             "' is not a positive number");
    w.push_back(v);
  }
  check_rank_weights(w, world_size, "rank weights \"" + text + "\"");
  return w;
}

RankShares launch_rank_shares(int world_size) {
  RankShares s;
  const char* weights = std::getenv(kRankWeightsEnv);
  if (const char* batches = std::getenv(kRankBatchesEnv)) {
    // Checked with or without a launcher: a typo is an error, not a setting silently ignored.
    MT_CHECK(std::string(batches) == "auto", kRankBatchesEnv, " (--rank-batches) expects auto, got '", batches, "'");
    MT_CHECK(!weights, "--rank-batches auto and --rank-weights both set each rank's share; give one");
    s.by_memory = true;
  }
  if (weights && std::string(weights) == "adaptive") {
    s.adaptive = true;
  } else if (weights && !read_launch_env().elastic_join) {
    s.weights = parse_rank_weights(weights, world_size);
  }
  return s;
}

int64_t rank_memory_budget(Device device, int local_world_size) {
  if (const char* v = std::getenv(kRankMemoryEnv)) return memory::parse_bytes(v, kRankMemoryEnv);
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
    each << (r ? ", " : "") << "rank " << r << " fits " << fits[r].batch << " in "
         << memory::format_bytes(fits[r].budget_bytes);
  }
  MT_CHECK(!none_fits && total >= global_batch, "--rank-batches auto: the global batch of ", global_batch,
           " samples does not fit the ranks' memory (", each.str(), "; ", total, " together",
           none_fits ? "; a rank that fits 0 cannot hold even 2 samples" : "",
           "); lower --batch-size or give the ranks more memory");
  std::vector<double> weights;
  for (const RankFit& f : fits) weights.push_back(static_cast<double>(f.batch));
  return weights;
}

std::vector<double> fit_rank_shares(Device device, int64_t global_batch,
                                    const std::function<int64_t(int64_t budget_bytes)>& fit, std::string* report) {
  MT_CHECK(static_cast<bool>(fit), "fit_rank_shares: no fit function given");
  MT_CHECK(global_batch >= 2, "--rank-batches auto: the global batch must be at least 2 samples (the smallest ",
           "share the search tries), got ", global_batch);
  const LaunchEnv env = read_launch_env();
  // A bad budget or a failed search still joins the gather (as a fit of -1), so every rank ends
  // with the same error instead of the others waiting for it until the timeout.
  RankFit mine;
  std::exception_ptr failure;
  try {
    // One GPU per rank, the one its LOCAL_RANK names, as the NCCL group picks it.
    mine.budget_bytes = rank_memory_budget(device.is_cuda() ? Device::cuda(env.local_rank) : device,
                                           env.local_world_size);
    mine.batch = fit(mine.budget_bytes);
  } catch (const std::exception&) {
    failure = std::current_exception();
    mine.batch = -1;
  }
  if (!is_initialized()) init_process_group();
  ProcessGroup& group = default_group();
  const Tensor own = from_vector(std::vector<int64_t>{mine.budget_bytes, mine.batch}, {2});
  std::vector<RankFit> fits;
  for (const Tensor& t : group.all_gather(own)) {
    const std::vector<int64_t> v = t.to_vector<int64_t>();
    fits.push_back({v[0], v[1]});
  }
  if (failure) std::rethrow_exception(failure);
  for (size_t r = 0; r < fits.size(); ++r)
    MT_CHECK(fits[r].batch >= 0, "--rank-batches auto: rank ", r, " could not size its batch (its own error says why)");
  std::vector<double> weights = rank_weights_from_fits(fits, global_batch);
  if (report) {
    const std::vector<int64_t> shares = DistributedSampler::split(global_batch, weights);
    std::ostringstream os;
    os << "rank batches (auto, by dry run): global batch " << global_batch;
    for (size_t r = 0; r < fits.size(); ++r)
      os << "; rank " << r << ": " << memory::format_bytes(fits[r].budget_bytes) << " fits " << fits[r].batch
         << ", takes " << shares[r];
    *report = os.str();
  }
  RankShares shares = group.rank_shares();
  shares.weights = weights;
  shares.by_memory = false;
  group.set_rank_shares(shares);
  return weights;
}

}  // namespace mixtrain::distributed
