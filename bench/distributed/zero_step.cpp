// What ZeRO-1 costs a data-parallel step: per rank, the same AdamW step on the same local batch
// under nn::DistributedDataParallel with a whole optimizer and with distributed::
// ZeroRedundancyOptimizer (reduce-scatter, the shard's update, all-gather), alternated in rounds;
// the median and the fastest of each are printed, with each rank's optimizer state. Run under the
// launcher, one thread per rank:
//   OMP_NUM_THREADS=1 mixtrain launch --nproc 4 -- build/bench/bench_dist_zero_step [batch] [rounds] [mlp|gpt]
// mlp: 215-1000-500-1 (default); gpt: the transformer trainer's GPT at its default size; batch
// counts this rank's samples (sequences).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <mixtrain/mixtrain.h>
#include <mixtrain/distributed/zero.h>

#include "workload.h"

namespace mt = mixtrain;
using mt_bench::median;
using mt_bench::Workload;

namespace {

int64_t state_bytes(const mt::optim::Optimizer& opt) {
  int64_t n = 0;
  for (const auto& [name, t] : opt.state_tensors()) n += t.nbytes();
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string model = argc > 3 ? argv[3] : "mlp";
  const int64_t batch = argc > 1 ? std::atoll(argv[1]) : (model == "gpt" ? 4 : 512);
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 15;
  if (model != "mlp" && model != "gpt") {
    std::fprintf(stderr, "usage: %s [batch] [rounds] [mlp|gpt]\n", argv[0]);
    return 2;
  }
  auto pg = mt::distributed::init_process_group();
  const uint64_t rank = static_cast<uint64_t>(pg->rank());
  const mt::Device cpu = mt::Device::cpu();
  Workload whole = mt_bench::make_workload(model, batch, cpu, rank),
           sharded = mt_bench::make_workload(model, batch, cpu, rank);
  mt::nn::DistributedDataParallel ddp_whole(whole.model), ddp_sharded(sharded.model);
  const auto adamw = mt::optim::AdamWOptions(1e-4);
  mt::optim::AdamW opt(whole.model->parameters(), adamw);
  mt::distributed::ZeroRedundancyOptimizer zero(ddp_sharded, [&](std::vector<mt::optim::ParamGroup> groups) {
    return std::make_unique<mt::optim::AdamW>(std::move(groups), adamw);
  });
  // Each backward is a DDP one: prepare_forward starts its round of bucket readiness.
  auto step_whole = [&] {
    opt.zero_grad();
    ddp_whole.prepare_forward(batch);
    whole.loss().backward();
    mt::nn::utils::clip_grad_norm_(whole.model->parameters(), 1.0);
    opt.step();
  };
  auto step_sharded = [&] {
    zero.zero_grad();
    ddp_sharded.prepare_forward(batch);
    sharded.loss().backward();
    zero.clip_grad_norm_(1.0);
    zero.step();
  };
  auto time_one = [&](const std::function<void()>& step) {
    pg->barrier();
    const auto t0 = std::chrono::steady_clock::now();
    step();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (int i = 0; i < 2; ++i) step_whole(), step_sharded();
  std::vector<double> t_whole, t_zero;
  for (int i = 0; i < rounds; ++i) {
    t_whole.push_back(time_one(step_whole));
    t_zero.push_back(time_one(step_sharded));
  }
  const double med_whole = median(t_whole), med_zero = median(t_zero);
  const double min_whole = *std::min_element(t_whole.begin(), t_whole.end());
  const double min_zero = *std::min_element(t_zero.begin(), t_zero.end());
  if (pg->rank() == 0)
    std::printf("cpu (Gloo): %s AdamW, batch %lld per rank, %d ranks: median step DDP %.2f ms, ZeRO-1 %.2f ms "
                "(x%.3f); fastest DDP %.2f ms, ZeRO-1 %.2f ms (x%.3f); rank 0's optimizer state DDP %lld B, ZeRO-1 "
                "%lld B (x%.3f)\n",
                model == "gpt" ? "GPT" : "MLP 215-1000-500-1", static_cast<long long>(batch), pg->world_size(),
                med_whole * 1e3, med_zero * 1e3, med_zero / med_whole, min_whole * 1e3, min_zero * 1e3,
                min_zero / min_whole, static_cast<long long>(state_bytes(opt)),
                static_cast<long long>(state_bytes(zero.optimizer())),
                static_cast<double>(state_bytes(zero.optimizer())) / static_cast<double>(state_bytes(opt)));
  return 0;
}
