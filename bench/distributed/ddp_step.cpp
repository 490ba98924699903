// What communication adds to a data-parallel training step when it overlaps backward: per rank,
// the same MLP step (215-1000-500-1, fp32, SGD) on the same local batch, plain and under
// nn::DistributedDataParallel, alternated in rounds, fastest of each kept (the machine may be
// shared). Run under the launcher, one thread per rank:
//   OMP_NUM_THREADS=1 mixtrain launch --nproc 2 -- build/bench/bench_dist_ddp_step [batch] [rounds] [cpu|cuda]
// With cuda, each rank's model and batch live on the GPU and DDP's all-reduces go through NCCL;
// at world size 1 that measures what the NCCL path itself costs a step.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "mixtrain/mixtrain.h"

namespace mt = mixtrain;

namespace {
mt::nn::Sequential make_mlp() {
  mt::manual_seed(1);
  return mt::nn::Sequential(mt::nn::Linear(215, 1000), mt::nn::ReLU(), mt::nn::Linear(1000, 500), mt::nn::ReLU(),
                            mt::nn::Linear(500, 1));
}
}  // namespace

int main(int argc, char** argv) {
  const int64_t batch = argc > 1 ? std::atoll(argv[1]) : 512;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 15;
  const bool cuda = argc > 3 && std::string(argv[3]) == "cuda";
  const mt::Device device = cuda ? mt::Device::cuda(0) : mt::Device::cpu();
  auto pg = mt::distributed::init_process_group();
  auto plain = make_mlp();
  auto wrapped = make_mlp();
  plain->to(device);
  wrapped->to(device);
  mt::nn::DistributedDataParallel ddp(wrapped);
  mt::optim::SGD opt_plain(plain->parameters(), mt::optim::SGDOptions(1e-3));
  mt::optim::SGD opt_ddp(wrapped->parameters(), mt::optim::SGDOptions(1e-3));
  mt::Generator gen;
  gen.manual_seed(static_cast<uint64_t>(pg->rank()));
  const mt::Tensor x = mt::randn({batch, 215}, gen).to(device), y = mt::randn({batch, 1}, gen).to(device);
  auto step_plain = [&] {
    opt_plain.zero_grad();
    mt::nn::functional::mse_loss(plain->forward(x), y).backward();
    opt_plain.step();
  };
  auto step_ddp = [&] {
    opt_ddp.zero_grad();
    mt::nn::functional::mse_loss(ddp.forward(x), y).backward();
    opt_ddp.step();
  };
  auto time_one = [&](auto&& fn) {
    pg->barrier();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    if (cuda) mt::cuda::synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (int i = 0; i < 2; ++i) step_plain(), step_ddp();
  double t_plain = 1e30, t_ddp = 1e30;
  for (int i = 0; i < rounds; ++i) {
    t_plain = std::min(t_plain, time_one(step_plain));
    t_ddp = std::min(t_ddp, time_one(step_ddp));
  }
  if (pg->rank() == 0)
    std::printf("%s: MLP 215-1000-500-1 fp32, batch %lld per rank, %d ranks, %lld buckets: plain step %.2f ms, DDP step "
                "%.2f ms (x%.3f); samples/s per rank %.0f plain, %.0f with DDP; all ranks %.0f\n",
                cuda ? "cuda (NCCL)" : "cpu (Gloo)", static_cast<long long>(batch), pg->world_size(),
                static_cast<long long>(ddp.num_buckets()),
                t_plain * 1e3, t_ddp * 1e3, t_ddp / t_plain, batch / t_plain, batch / t_ddp,
                batch * pg->world_size() / t_ddp);
  return 0;
}
