// What communication adds to a data-parallel training step when it overlaps backward: per rank,
// the same step (SGD) on the same local batch, plain and under nn::DistributedDataParallel,
// alternated in rounds; the median and the fastest of each are printed. Run under the launcher,
// one thread per rank:
//   OMP_NUM_THREADS=1 mixtrain launch --nproc 2 -- build/bench/bench_dist_ddp_step [batch]
//        [rounds] [cpu|cuda] [mlp|gpt] [fp32|bf16]
// mlp: 215-1000-500-1 (default). gpt: the transformer trainer's GPT, its default size on the CPU
// and BERT-base's sizes (context 128) on the GPU; batch counts sequences. bf16 runs the forward
// under autocast. With cuda, each rank's model and batch live on the GPU and DDP's all-reduces go
// through NCCL; at world size 1 that measures what the NCCL path itself costs a step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <mixtrain/mixtrain.h>

#include "workload.h"

namespace mt = mixtrain;
using mt_bench::median;
using mt_bench::Workload;

int main(int argc, char** argv) {
  const std::string model = argc > 4 ? argv[4] : "mlp", precision = argc > 5 ? argv[5] : "fp32";
  const int64_t batch = argc > 1 ? std::atoll(argv[1]) : (model == "gpt" ? 8 : 512);
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 15;
  const bool cuda = argc > 3 && std::string(argv[3]) == "cuda";
  if ((model != "mlp" && model != "gpt") || (precision != "fp32" && precision != "bf16")) {
    std::fprintf(stderr, "usage: %s [batch] [rounds] [cpu|cuda] [mlp|gpt] [fp32|bf16]\n", argv[0]);
    return 2;
  }
  // Each rank on its own GPU, the one its NCCL communicator binds.
  const mt::Device device = cuda ? mt::Device::cuda(mt::distributed::read_launch_env().local_rank) : mt::Device::cpu();
  auto pg = mt::distributed::init_process_group();
  const uint64_t rank = static_cast<uint64_t>(pg->rank());
  Workload plain = mt_bench::make_workload(model, batch, device, rank),
           wrapped = mt_bench::make_workload(model, batch, device, rank);
  mt::nn::DistributedDataParallel ddp(wrapped.model);
  mt::optim::SGD opt_plain(plain.model->parameters(), mt::optim::SGDOptions(1e-3));
  mt::optim::SGD opt_ddp(wrapped.model->parameters(), mt::optim::SGDOptions(1e-3));
  auto step = [&](Workload& w, mt::optim::SGD& opt) {
    opt.zero_grad();
    // The wrapped model's forward is called directly, so DDP's round of bucket readiness starts
    // here (ddp.forward would do it); without it only the first backward communicated.
    if (&w == &wrapped) ddp.prepare_forward(batch);
    mt::Tensor loss;
    {
      mt::amp::AutocastGuard autocast(device.type, mt::kBFloat16, /*enabled=*/precision == "bf16");
      loss = w.loss();
    }
    loss.backward();
    opt.step();
  };
  auto time_one = [&](Workload& w, mt::optim::SGD& opt) {
    pg->barrier();
    const auto t0 = std::chrono::steady_clock::now();
    step(w, opt);
    if (cuda) mt::cuda::synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (int i = 0; i < 2; ++i) step(plain, opt_plain), step(wrapped, opt_ddp);
  std::vector<double> t_plain, t_ddp;
  for (int i = 0; i < rounds; ++i) {
    t_plain.push_back(time_one(plain, opt_plain));
    t_ddp.push_back(time_one(wrapped, opt_ddp));
  }
  const double med_plain = median(t_plain), med_ddp = median(t_ddp);
  const double min_plain = *std::min_element(t_plain.begin(), t_plain.end());
  const double min_ddp = *std::min_element(t_ddp.begin(), t_ddp.end());
  if (pg->rank() == 0)
    std::printf("%s: %s %s, batch %lld per rank, %d ranks, %lld buckets: median step plain %.2f ms, DDP %.2f ms "
                "(x%.3f); fastest plain %.2f ms, DDP %.2f ms (x%.3f); samples/s of all ranks at the DDP median %.0f\n",
                cuda ? "cuda (NCCL)" : "cpu (Gloo)", model == "gpt" ? "GPT" : "MLP 215-1000-500-1", precision.c_str(),
                static_cast<long long>(batch), pg->world_size(), static_cast<long long>(ddp.num_buckets()),
                med_plain * 1e3, med_ddp * 1e3, med_ddp / med_plain, min_plain * 1e3, min_ddp * 1e3, min_ddp / min_plain,
                batch * pg->world_size() / med_ddp);
  return 0;
}
