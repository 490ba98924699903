// The batch-fit search of batch_fit.h.
#include "mixtrain/memory/batch_fit.h"

#include <algorithm>

#include "mixtrain/base/error.h"

namespace mixtrain::memory {

BatchFit fit_batch(const std::function<int64_t(int64_t)>& peak_bytes_at, int64_t limit, int64_t min_batch,
                   int64_t max_batch) {
  MT_CHECK(static_cast<bool>(peak_bytes_at), "memory::fit_batch: no peak function given");
  return fit_batch([&](int64_t batch) { return BatchProbe{peak_bytes_at(batch)}; }, limit, min_batch, max_batch);
}

BatchFit fit_batch(const std::function<BatchProbe(int64_t)>& probe_batch, int64_t limit, int64_t min_batch,
                   int64_t max_batch) {
  MT_CHECK(static_cast<bool>(probe_batch), "memory::fit_batch: no probe function given");
  MT_CHECK(min_batch >= 1 && max_batch >= min_batch, "memory::fit_batch: the batches searched [", min_batch, ", ",
           max_batch, "] must be a non-empty range of positive sizes");
  BatchFit r;
  const auto at = [&](int64_t batch) {
    ++r.dry_runs;
    BatchProbe p = probe_batch(batch);
    if (p.trend_bytes < 0) p.trend_bytes = p.bytes;
    return p;
  };
  r.batch = min_batch;
  const BatchProbe first = at(min_batch);
  r.peak_bytes = first.bytes;
  if (r.peak_bytes > limit) {
    r.over_batch = min_batch;
    r.over_peak_bytes = r.peak_bytes;
    return r;
  }
  r.fits = true;
  int64_t lo = min_batch, hi = 0;  // lo fits; hi (when > 0) does not
  int64_t trend_at_lo = first.trend_bytes;
  const auto probe = [&](int64_t batch) {
    const BatchProbe p = at(batch);
    const bool fits = p.bytes <= limit;
    if (fits && batch > lo) {
      lo = batch;
      r.batch = batch;
      r.peak_bytes = p.bytes;
      trend_at_lo = p.trend_bytes;
    } else if (!fits && (hi == 0 || batch < hi)) {
      hi = batch;
      r.over_peak_bytes = p.bytes;
    }
    return fits;
  };
  // Each probe is a dry run (tens of ms for a large model), so guess first: the peak grows about
  // linearly with the batch. The guess and its neighbour usually settle it; doubling and
  // interpolation below make the answer exact whatever the guess.
  if (max_batch >= 2 * min_batch && probe(2 * min_batch)) {
    const int64_t slope = (trend_at_lo - first.trend_bytes) / min_batch;
    if (slope > 0) {
      const int64_t guess = std::clamp<int64_t>(lo + (limit - r.peak_bytes) / slope, lo, max_batch);
      if (guess > lo) {
        if (probe(guess)) {
          if (guess < max_batch) probe(guess + 1);
        } else if (guess - 1 > lo) {
          probe(guess - 1);
        }
      }
    }
  }
  while (hi == 0 && lo < max_batch) probe(lo > max_batch / 2 ? max_batch : lo * 2);
  // Interpolate between the peaks at lo and hi (near-linear, so a probe or two), bisecting after
  // any probe that did not halve the interval, so it stays O(log) whatever the curve.
  bool bisect = false;
  while (hi > lo + 1) {
    const int64_t width = hi - lo;
    int64_t mid = lo + width / 2;
    if (!bisect && r.over_peak_bytes > r.peak_bytes) {
      const double t = static_cast<double>(limit - r.peak_bytes) / static_cast<double>(r.over_peak_bytes - r.peak_bytes);
      mid = std::clamp<int64_t>(lo + static_cast<int64_t>(t * static_cast<double>(width)), lo + 1, hi - 1);
    }
    probe(mid);
    bisect = !bisect && 2 * (hi - lo) > width;
  }
  r.over_batch = hi;
  r.capped = hi == 0;
  return r;
}

}  // namespace mixtrain::memory
