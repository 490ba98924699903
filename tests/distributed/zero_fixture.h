#pragma once
// What the ZeRO tests train: a small MLP, the global batches every rank draws alike, and one
// data-parallel step's forward and backward the trainers' way.
#include <utility>
#include <vector>

#include "mixtrain/mixtrain.h"

namespace mt_dist_test {

namespace zf = ::mixtrain;

inline zf::nn::Sequential make_mlp(uint64_t seed) {
  zf::manual_seed(seed);
  return zf::nn::Sequential(zf::nn::Linear(8, 48), zf::nn::ReLU(), zf::nn::Linear(48, 40), zf::nn::ReLU(),
                            zf::nn::Linear(40, 3));
}

// The data of the tests: `steps` global batches of `global` rows, the same on every rank.
struct Data {
  zf::Tensor x, y;
  int64_t global;
  Data(int64_t g, int64_t steps) : global(g) {
    zf::Generator gen;
    gen.manual_seed(4242);
    x = zf::randn({g * steps, 8}, gen);
    y = zf::randn({g * steps, 3}, gen);
  }
  // Rank r's rows of batch `step` under `weights` (all of them: r = -1).
  std::pair<zf::Tensor, zf::Tensor> rows(int64_t step, const std::vector<double>& weights, int r) const {
    if (r < 0)
      return {x.narrow(0, step * global, global).contiguous(), y.narrow(0, step * global, global).contiguous()};
    const auto sizes = zf::distributed::DistributedSampler::split(global, weights);
    int64_t begin = step * global;
    for (int q = 0; q < r; ++q) begin += sizes[static_cast<size_t>(q)];
    const int64_t n = sizes[static_cast<size_t>(r)];
    return {x.narrow(0, begin, n).contiguous(), y.narrow(0, begin, n).contiguous()};
  }
};

// One data-parallel step's forward and backward, the trainers' way (the loss scaled by the share).
inline void backward(zf::nn::DistributedDataParallel& ddp, zf::nn::Module& model, const Data& d, int64_t step,
                     const std::vector<double>& weights, zf::DType dtype) {
  auto [x, y] = d.rows(step, weights, ddp.group().rank());
  ddp.prepare_forward();
  const zf::Tensor out = model.forward(x.to(dtype)).to(zf::kFloat32);
  ddp.set_local_batch(x.size(0), d.global);
  ddp.scale_loss(zf::nn::functional::mse_loss(out, y)).backward();
}

}  // namespace mt_dist_test
