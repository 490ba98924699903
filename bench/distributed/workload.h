#pragma once
// The data-parallel benchmarks' workloads (bench_dist_ddp_step, bench_dist_zero_step): the MLP
// 215-1000-500-1 or the transformer trainer's GPT, with one rank's synthetic batch.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <mixtrain/mixtrain.h>

#include "transformer/gpt_model.h"

namespace mt_bench {

namespace mt = mixtrain;
namespace F = mt::nn::functional;

// One model, its synthetic batch and its loss. make_workload gives both copies of a rank the same.
struct Workload {
  std::shared_ptr<mt::nn::Module> model;
  mt::Tensor x, y;
  bool gpt = false;
  int64_t vocab = 0;

  mt::Tensor loss() {
    if (!gpt) return F::mse_loss(model->forward(x), y);
    const mt::Tensor logits = model->forward(x);
    return F::cross_entropy(logits.reshape({-1, vocab}), y.reshape({-1}));
  }
};

inline Workload make_workload(const std::string& name, int64_t batch, mt::Device device, uint64_t rank) {
  mt::manual_seed(1);  // the same parameters on every rank and for both copies
  Workload w;
  if (name == "gpt") {
    const mt::examples::GptOptions o =
        device.is_cuda() ? mt::examples::GptOptions::bert_base() : mt::examples::GptOptions{};
    w.model = mt::examples::Gpt(o).ptr();
    w.gpt = true;
    w.vocab = o.vocab;
    mt::manual_seed(100 + rank);  // each rank its own batch
    w.x = mt::randint(0, o.vocab, {batch, o.context}).to(device);
    w.y = mt::randint(0, o.vocab, {batch, o.context}).to(device);
  } else {
    w.model = mt::nn::Sequential(mt::nn::Linear(215, 1000), mt::nn::ReLU(), mt::nn::Linear(1000, 500), mt::nn::ReLU(),
                                 mt::nn::Linear(500, 1))
                  .ptr();
    mt::manual_seed(100 + rank);
    w.x = mt::randn({batch, 215}).to(device);
    w.y = mt::randn({batch, 1}).to(device);
  }
  w.model->to(device);
  return w;
}

// Medians say what a step costs on a shared machine; minima what it costs when nothing else ran.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace mt_bench
