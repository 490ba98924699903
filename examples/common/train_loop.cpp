#include "common/train_loop.h"

#include <chrono>

namespace mixtrain::examples {

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::Fp32;
  if (name == "fp16") return Precision::Fp16;
  if (name == "bf16") return Precision::Bf16;
  MT_ERROR("unknown precision '", name, "' (expected fp32, fp16 or bf16)");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::Fp32: return "fp32";
    case Precision::Fp16: return "fp16";
    case Precision::Bf16: return "bf16";
  }
  return "?";
}

TrainResult train(TrainTask& task, const TrainOptions& options, const std::function<void(const StepRecord&)>& on_step) {
  using clock = std::chrono::steady_clock;
  nn::Module& model = task.model();
  model.to(options.device);
  optim::AdamW opt(model.parameters(), optim::AdamWOptions().lr(options.lr).weight_decay(options.weight_decay));
  // bf16 has fp32's range: no loss scaling needed, so the scaler is a pass-through there.
  amp::GradScaler scaler(amp::GradScalerOptions()
                             .init_scale(options.init_scale)
                             .enabled(options.precision == Precision::Fp16));
  const bool autocast = options.precision != Precision::Fp32;
  const DType amp_dtype = options.precision == Precision::Bf16 ? kBFloat16 : kFloat16;

  TrainResult result;
  if (!options.resume_dir.empty()) {
    const int64_t done = io::load_checkpoint(options.resume_dir, model, opt, scaler);
    task.skip_batches(done);
    result.first_step = done + 1;
  }
  memory::reset_peak_stats(options.device);
  const auto start = clock::now();
  for (int64_t step = result.first_step; step <= options.steps; ++step) {
    const auto t0 = clock::now();
    StepRecord rec;
    rec.step = step;
    rec.scale = scaler.get_scale();
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard guard(options.device.type, amp_dtype, autocast);
      loss = task.next_loss();
    }
    scaler.scale(loss).backward();
    scaler.unscale_(opt);
    if (options.clip_norm > 0) rec.grad_norm = nn::utils::clip_grad_norm_(model.parameters(), options.clip_norm);
    rec.skipped = !scaler.step(opt);
    scaler.update();
    rec.loss = loss.item<double>();
    rec.seconds = std::chrono::duration<double>(clock::now() - t0).count();
    result.skipped_steps += rec.skipped;
    result.records.push_back(rec);
    if (on_step) on_step(rec);
    const bool last = step == options.steps;
    if (!options.save_dir.empty() && (last || (options.save_every > 0 && step % options.save_every == 0)))
      io::save_checkpoint(options.save_dir, model, opt, scaler, step);
  }
  result.seconds = std::chrono::duration<double>(clock::now() - start).count();
  result.memory = memory::stats(options.device);
  return result;
}

}  // namespace mixtrain::examples
