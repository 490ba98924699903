#pragma once
// The largest batch whose training step fits a memory budget, searched with a step's predicted
// peak (memory::dry_run_step(...).peak_bytes() at each batch tried): `mixtrain memory --fit` and
// each rank's share under `mixtrain launch --rank-batches auto` (distributed/rank_shares.h).
#include <cstdint>
#include <functional>

namespace mixtrain::memory {

struct BatchFit {
  bool fits = false;            // min_batch fits
  int64_t batch = 0;            // the largest batch that fits (min_batch when none does)
  int64_t peak_bytes = 0;       // the peak at `batch`
  int64_t over_batch = 0;       // the smallest batch tried that does not fit (0: none found)
  int64_t over_peak_bytes = 0;  // its peak
  bool capped = false;          // fits, and batch is max_batch: larger batches were not tried
  int dry_runs = 0;             // calls of peak_bytes_at
};

// A batch of 2^30 samples is past any device; a dry run's cost does not grow with the batch, so
// the search needs an end of its own.
constexpr int64_t kMaxFitBatch = int64_t{1} << 30;

// The largest batch in [min_batch, max_batch] whose peak_bytes_at(batch) is at most limit_bytes,
// for a peak that grows with the batch: a linear guess from the peaks at min_batch and twice it,
// and its neighbour, then doubling and interpolating (bisecting after a probe that did not halve
// the interval) until exact, so O(log) probes whatever the curve.
BatchFit fit_batch(const std::function<int64_t(int64_t batch)>& peak_bytes_at, int64_t limit_bytes,
                   int64_t min_batch, int64_t max_batch = kMaxFitBatch);

// What a probe of the search below reports about one batch.
struct BatchProbe {
  int64_t bytes = 0;  // the figure kept within the limit
  // A figure that grows smoothly with the batch, from which the first guess is drawn: the
  // allocated peak when `bytes` is the caching allocator's reserved bytes, which rise in
  // segment-sized steps (flat from 2 to 4 for a small model, leaving doubling to find the
  // answer). -1: `bytes` itself.
  int64_t trend_bytes = -1;
};
// The same search on probe(batch).bytes, its linear guess from the trend (BatchFit's peak_bytes
// and over_peak_bytes are the probes' `bytes`).
BatchFit fit_batch(const std::function<BatchProbe(int64_t batch)>& probe, int64_t limit_bytes, int64_t min_batch,
                   int64_t max_batch = kMaxFitBatch);

}  // namespace mixtrain::memory
