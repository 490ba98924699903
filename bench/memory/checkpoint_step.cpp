// Activation checkpointing on the GPT trainer's model: peak allocated bytes of one training step
// (forward, backward, AdamW step) above the bytes alive before it (parameters and optimizer
// state; gradients were zeroed: the step's activations, gradients and temporaries), the bytes still allocated when the
// forward pass ends (the activations kept for backward), and the median step time, with and
// without --checkpoint-activations, runs alternating. A plain program (docs/BENCHMARKS.md):
//   bench_checkpoint_step [tiny|small] [fp32|bf16] [steps]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <mixtrain/mixtrain.h>

#include "transformer/transformer_trainer.h"

namespace mt = mixtrain;
namespace ex = mixtrain::examples;

namespace {

struct Run {
  ex::Gpt model{nullptr};
  std::unique_ptr<mt::optim::AdamW> opt;
  mt::Tensor x, y;
};

Run make_run(const ex::GptOptions& o, int64_t batch, bool checkpointed) {
  mt::manual_seed(1);
  ex::GptOptions oc = o;
  oc.checkpoint_activations = checkpointed;
  Run r;
  r.model = ex::Gpt(oc);
  r.opt = std::make_unique<mt::optim::AdamW>(r.model->parameters(), mt::optim::AdamWOptions(1e-4));
  r.x = mt::mul(mt::rand({batch, o.context}), 255.0).to(mt::kInt64);
  r.y = mt::mul(mt::rand({batch, o.context}), 255.0).to(mt::kInt64);
  return r;
}

// Bytes allocated when the forward pass ends: what is kept for backward (plus the loss).
int64_t g_after_forward = 0;

double step(Run& r, bool bf16) {
  mt::Tensor loss;
  {
    mt::amp::AutocastGuard guard(mt::DeviceType::CPU, mt::kBFloat16, bf16);
    mt::Tensor logits = r.model->forward(r.x);
    loss = mt::nn::functional::cross_entropy(logits.reshape({-1, 256}).to(mt::kFloat32), r.y.reshape({-1}));
  }
  g_after_forward = mt::memory::stats(mt::Device::cpu()).allocated_bytes;
  loss.backward();
  r.opt->step();
  return loss.item<float>();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string size = argc > 1 ? argv[1] : "tiny";
  const bool bf16 = argc > 2 && std::string(argv[2]) == "bf16";
  const int steps = argc > 3 ? std::stoi(argv[3]) : 21;
  const ex::GptOptions o = ex::gpt_preset(size);
  const int64_t batch = size == "tiny" ? 8 : 16;  // the trainers' bench/default batch sizes
  const mt::Device cpu = mt::Device::cpu();
  Run runs[2] = {make_run(o, batch, false), make_run(o, batch, true)};
  int64_t in_step[2] = {0, 0}, peak[2] = {0, 0}, kept[2] = {0, 0};
  double losses[2] = {0, 0};
  std::vector<double> ms[2];
  for (int k = 0; k < 2; ++k) step(runs[k], bf16);  // gradients and optimizer state exist from here
  for (int i = 0; i < steps; ++i) {
    for (int k : {i % 2, 1 - i % 2}) {  // alternate which goes first
      runs[k].opt->zero_grad();  // gradients are born in backward: part of the step's bytes
      mt::memory::reset_peak_stats(cpu);
      const int64_t before = mt::memory::stats(cpu).allocated_bytes;
      const auto t0 = std::chrono::steady_clock::now();
      losses[k] = step(runs[k], bf16);
      ms[k].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      const mt::memory::Stats s = mt::memory::stats(cpu);
      in_step[k] = std::max(in_step[k], s.peak_allocated_bytes - before);
      kept[k] = std::max(kept[k], g_after_forward - before);
      peak[k] = std::max(peak[k], s.peak_allocated_bytes);
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("gpt %s (%lld layers, width %lld, context %lld), batch %lld, %s, %d steps each\n", size.c_str(),
              static_cast<long long>(o.layers), static_cast<long long>(o.width), static_cast<long long>(o.context),
              static_cast<long long>(batch), bf16 ? "bf16 autocast" : "fp32", steps);
  const char* names[2] = {"plain", "checkpointed"};
  for (int k = 0; k < 2; ++k)
    std::printf("%-13s peak allocated %10lld B, in-step peak %10lld B, kept after forward %10lld B, median step %8.2f ms, "
                "last loss %.6f\n", names[k], static_cast<long long>(peak[k]), static_cast<long long>(in_step[k]),
                static_cast<long long>(kept[k]), median(ms[k]), losses[k]);
  std::printf("ratio         in-step peak %.3fx, kept after forward %.3fx, step time %.3fx, losses %s\n",
              static_cast<double>(in_step[1]) / static_cast<double>(in_step[0]),
              static_cast<double>(kept[1]) / static_cast<double>(kept[0]), median(ms[1]) / median(ms[0]),
              losses[0] == losses[1] ? "identical" : "DIFFER");
  return 0;
}
