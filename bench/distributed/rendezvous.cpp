// How long a job takes to come together: each rank stamps the wall clock when its main() starts
// and when init_process_group() and a first barrier have returned; rank 0 prints the span from
// the first rank's start to the last rank past the barrier, and the longest init_process_group.
//   mixtrain launch --nproc 8 --master-port 29600 -- build/bench/bench_dist_rendezvous  # TCP store
//   mixtrain launch --nproc 8 -- build/bench/bench_dist_rendezvous                      # file store
#include <chrono>
#include <cstdio>

#include "mixtrain/mixtrain.h"

namespace mt = mixtrain;
namespace dist = mixtrain::distributed;

int main() {
  auto now_ms = [] {
    return std::chrono::duration<double, std::milli>(std::chrono::system_clock::now().time_since_epoch()).count();
  };
  const double start = now_ms();
  auto pg = dist::init_process_group();
  const double joined = now_ms();
  pg->barrier();
  const double through = now_ms();
  const auto all = pg->all_gather(mt::from_vector<double>({start, joined - start, through}, {3}, mt::TensorOptions(mt::kFloat64)));
  if (pg->rank() == 0) {
    double first = 1e300, last = 0, init = 0;
    for (const auto& t : all) {
      const auto v = t.to_vector<double>();
      first = std::min(first, v[0]);
      init = std::max(init, v[1]);
      last = std::max(last, v[2]);
    }
    std::printf("rendezvous of %d ranks: %.0f ms from the first rank's start to the last rank past the first "
                "barrier; init_process_group took at most %.0f ms\n",
                pg->world_size(), last - first, init);
  }
  return 0;
}
