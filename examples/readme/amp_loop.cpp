// The training loops the README shows, as one program that builds and runs: a regression MLP
// trained with fp16 autocast and GradScaler, then with gradient accumulation, then with bf16
// autocast and no scaler. Each region between "readme:NAME begin" and "readme:NAME end" is quoted
// in README.md word for word (tests/examples/test_readme.cpp checks it). Exits 1 unless the loss
// falls.
#include <cstdio>

#include <mixtrain/mixtrain.h>

namespace mt = mixtrain;
using mt::nn::functional::mse_loss;

namespace {

// The mean training loss over one pass of the loader, without gradients.
double mean_loss(mt::nn::Sequential& model, mt::data::DataLoader& loader) {
  mt::NoGradGuard no_grad;
  double sum = 0;
  int batches = 0;
  for (const mt::data::Batch& b : loader) {
    sum += mse_loss(model(b.data), b.target).item<double>();
    ++batches;
  }
  return sum / batches;
}

}  // namespace

int main() {
  mt::manual_seed(0);
  const mt::Device device = mt::cuda::is_available() ? mt::Device::cuda() : mt::Device::cpu();
  mt::Tensor x = mt::randn({2048, 16});
  mt::data::TensorDataset dataset(x, x.sum({1}, /*keepdim=*/true).tanh());
  mt::data::DataLoader loader(dataset, mt::data::DataLoaderOptions().batch_size(64).shuffle(true).device(device));
  mt::nn::Sequential model(mt::nn::Linear(16, 64), mt::nn::ReLU(), mt::nn::Linear(64, 1));
  model->to(device);
  mt::optim::AdamW opt(model->parameters(), mt::optim::AdamWOptions().lr(1e-3));
  const double before = mean_loss(model, loader);

  // readme:fp16 begin
  mt::amp::GradScaler scaler;  // fp16 only: bf16 needs no loss scaling
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (const mt::data::Batch& b : loader) {
      opt.zero_grad();
      mt::Tensor loss;
      {
        mt::amp::AutocastGuard autocast(device.type, mt::kFloat16);  // matmuls in fp16, the loss in fp32
        loss = mse_loss(model(b.data), b.target);
      }
      scaler.scale(loss).backward();  // scaled, so small fp16 gradients do not flush to zero
      scaler.unscale_(opt);           // the true gradients, to clip
      mt::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
      scaler.step(opt);  // skipped when a gradient holds inf/NaN
      scaler.update();   // lowers the scale after a skip, raises it after 2000 good steps
    }
  }
  // readme:fp16 end

  // readme:accumulate begin
  const int accumulate = 4;  // one optimizer step per 4 batches: a 4x larger effective batch
  int micro = 0;
  for (const mt::data::Batch& b : loader) {
    mt::Tensor loss;
    {
      mt::amp::AutocastGuard autocast(device.type, mt::kFloat16);
      loss = mse_loss(model(b.data), b.target) / accumulate;
    }
    scaler.scale(loss).backward();  // gradients add up across the micro-batches
    if (++micro % accumulate != 0) continue;
    scaler.unscale_(opt);  // once per optimizer step, after the last micro-batch
    mt::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    scaler.step(opt);
    scaler.update();
    opt.zero_grad();
  }
  // readme:accumulate end

  // readme:bf16 begin
  for (const mt::data::Batch& b : loader) {
    opt.zero_grad();
    mt::Tensor loss;
    {
      mt::amp::AutocastGuard autocast(device.type, mt::kBFloat16);  // fp32's range: no scaler
      loss = mse_loss(model(b.data), b.target);
    }
    loss.backward();
    mt::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    opt.step();
  }
  // readme:bf16 end

  const double after = mean_loss(model, loader);
  std::printf("readme loop on %s: loss %.4f -> %.4f\n", device.str().c_str(), before, after);
  return after < 0.5 * before ? 0 : 1;
}
