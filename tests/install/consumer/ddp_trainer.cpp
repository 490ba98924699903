// A user's data-parallel trainer, written against the installed package only: DDP and the
// sampler's group form, and not a line about per-rank shares. Under `mixtrain launch
// --rank-weights 2,1,1` or `--rank-batches auto` it trains on the shares the launcher asked for;
// tests/install/check_install.cmake runs it so and reads what it prints:
//   rank R step K rows N                     each step's share of the global batch
//   rank R fits F peak P budget B             --rank-batches auto: this rank's own largest fitting
//                                            share, and its share's predicted peak in its budget
// `ddp_trainer --peak ROWS` prints the predicted peak of a share of ROWS rows and exits (no
// launcher): the test sizes the budgets with it.
#include <mixtrain/mixtrain.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>

namespace mt = mixtrain;
namespace dist = mixtrain::distributed;

namespace {

constexpr int64_t kInputs = 32, kGlobalBatch = 96, kSamples = 4096, kSteps = 3;

mt::nn::Sequential make_model() {
  mt::manual_seed(0);
  return mt::nn::Sequential(mt::nn::Linear(kInputs, 256), mt::nn::ReLU(), mt::nn::Linear(256, 1));
}

// One training step for a share of `rows` samples, on meta tensors: what --rank-batches auto
// dry-runs to size each rank's share.
std::function<void()> meta_step(int64_t rows) {
  mt::nn::init::SkipInitGuard skip_init;
  auto model = std::make_shared<mt::nn::Sequential>(make_model());
  (*model)->to(mt::Device::meta());
  auto opt = std::make_shared<mt::optim::SGD>((*model)->parameters(), mt::optim::SGDOptions(0.01));
  const mt::TensorOptions meta = mt::TensorOptions().device(mt::Device::meta());
  return [=] {
    opt->zero_grad();
    mt::Tensor x = mt::empty({rows, kInputs}, meta), y = mt::empty({rows, 1}, meta);
    mt::nn::functional::mse_loss((*model)->forward(x), y).backward();
    opt->step();
  };
}

int64_t peak_bytes(int64_t rows) { return mt::memory::dry_run_step(mt::Device::cpu(), meta_step(rows)).peak_bytes(); }

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--peak") {
    std::printf("%lld\n", static_cast<long long>(peak_bytes(std::atoll(argv[2]))));
    return 0;
  }
  auto pg = dist::init_process_group();
  dist::DistributedSampler sampler(kSamples, kGlobalBatch, dist::DistributedSamplerOptions().seed(1).dry_run_step(meta_step));
  mt::manual_seed(1);
  const mt::Tensor inputs = mt::randn({kSamples, kInputs}), targets = mt::randn({kSamples, 1});
  auto model = make_model();
  mt::nn::DistributedDataParallel ddp(model);
  mt::optim::SGD opt(model->parameters(), mt::optim::SGDOptions(0.01));
  for (int64_t step = 0; step < kSteps; ++step) {
    const std::vector<int64_t> rows = sampler.batch(step);
    const mt::Tensor index = mt::from_vector(rows, {static_cast<int64_t>(rows.size())});
    opt.zero_grad();
    const mt::Tensor out = ddp.forward(mt::index_select(inputs, 0, index));
    ddp.scale_loss(mt::nn::functional::mse_loss(out, mt::index_select(targets, 0, index))).backward();
    opt.step();
    std::printf("rank %d step %lld rows %zu\n", pg->rank(), static_cast<long long>(step), rows.size());
  }
  if (const char* budget = std::getenv(dist::kRankMemoryEnv)) {
    const int64_t bytes = mt::memory::parse_bytes(budget, dist::kRankMemoryEnv);
    const mt::memory::BatchFit fit = mt::memory::fit_batch(peak_bytes, bytes, 2, kGlobalBatch);
    const int64_t share = sampler.batch_sizes(0)[static_cast<size_t>(pg->rank())];
    std::printf("rank %d fits %lld peak %lld budget %lld\n", pg->rank(), static_cast<long long>(fit.batch),
                static_cast<long long>(peak_bytes(share)), static_cast<long long>(bytes));
  }
  return 0;
}
