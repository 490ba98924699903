#include "bench_prediction.h"

#include <memory>

#include <mixtrain/amp/fp8.h>
#include <mixtrain/amp/grad_scaler.h>
#include <mixtrain/memory/dry_run.h>
#include <mixtrain/memory/plan.h>
#include <mixtrain/nn/skip_init.h>
#include <mixtrain/nn/utils.h>
#include <mixtrain/optim/adamw.h>

namespace mixtrain::cli {

StepMemoryPrediction predict_step_memory(TaskSpec spec, train::Precision precision, double lr) {
  const Device target = spec.device;
  spec.device = Device::meta();
  // Never read on meta: the weights are left uninitialised (nn/skip_init.h), which saves the
  // full transformer's CPU draws (one per parameter).
  const auto task = [&] {
    nn::init::SkipInitGuard skip_init;
    return make_task(spec);
  }();
  nn::Module& model = task->model();
  model.to(Device::meta());
  // As train::train sets up and steps (TrainOptions' defaults: clipping at 1, loss scaling
  // for fp16 only), with zero_grad at the end as --memory-plan takes it: the gradients are then
  // in-step buffers, and the peak is the same as with zero_grad first.
  optim::AdamW opt(model.parameters(), optim::AdamWOptions().lr(lr));
  amp::GradScaler scaler(amp::GradScalerOptions().enabled(precision == train::Precision::Fp16));
  const std::unique_ptr<amp::Fp8Scaling> fp8 = train::make_fp8_scaling(model, precision, amp::Fp8Recipe());
  auto step = [&](DeviceType autocast_type) {
    opt.zero_grad();
    Tensor loss;
    {
      const train::ForwardScope scope(autocast_type, precision);
      loss = task->next_loss();
    }
    scaler.scale(loss).backward();
    scaler.unscale_(opt);
    nn::utils::clip_grad_norm_(model.parameters(), 1.0);
    scaler.step(opt);
    scaler.update();
    if (fp8) fp8->update();
    opt.zero_grad();
  };
  // Outside a dry run meta tensors follow the meta device's autocast state; inside, the target's.
  step(DeviceType::Meta);
  const memory::MemoryTrace trace = memory::dry_run(target, [&] { step(target.type); });
  const memory::ArenaPlan plan = memory::plan_arena(trace.lifetimes());
  StepMemoryPrediction out;
  out.peak_bytes = static_cast<int64_t>(trace.peak_bytes());
  out.plan_arena_bytes = static_cast<int64_t>(plan.arena_bytes);
  out.lower_bound_bytes = static_cast<int64_t>(plan.lower_bound_bytes);
  return out;
}

}  // namespace mixtrain::cli
