#pragma once
// PyTorch's everyday learning-rate schedulers: LinearLR (warm-up), StepLR, MultiStepLR,
// ExponentialLR, LambdaLR, and SequentialLR to chain them (e.g. warm-up then cosine). Like
// CosineAnnealingLR they evaluate PyTorch's closed forms from the epoch (lr_scheduler.h), which
// equal the values of PyTorch's recursive (chained) updates up to rounding.
#include <functional>
#include <memory>
#include <vector>

#include "mixtrain/optim/lr_scheduler.h"

namespace mixtrain::optim {

// base_lr * (start_factor + (end_factor - start_factor) * min(epoch, total_iters) / total_iters)
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3.0, double end_factor = 1.0, int64_t total_iters = 5);

 protected:
  std::vector<double> lrs_at(int64_t epoch) override;
  const char* name() const override { return "LinearLR"; }
  nlohmann::json settings() const override;

 private:
  double start_factor_, end_factor_;
  int64_t total_iters_;
};

// base_lr * gamma ^ floor(epoch / step_size)
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  std::vector<double> lrs_at(int64_t epoch) override;
  const char* name() const override { return "StepLR"; }
  nlohmann::json settings() const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// base_lr * gamma ^ (number of milestones <= epoch); a repeated milestone counts twice.
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);

 protected:
  std::vector<double> lrs_at(int64_t epoch) override;
  const char* name() const override { return "MultiStepLR"; }
  nlohmann::json settings() const override;

 private:
  std::vector<int64_t> milestones_;  // sorted
  double gamma_;
};

// base_lr * gamma ^ epoch
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);

 protected:
  std::vector<double> lrs_at(int64_t epoch) override;
  const char* name() const override { return "ExponentialLR"; }
  nlohmann::json settings() const override;

 private:
  double gamma_;
};

// base_lr * lambda(epoch), one lambda for every group or one per group. As in PyTorch the
// functions are not saved: a loaded state restores the epoch and the base rates.
class LambdaLR : public LRScheduler {
 public:
  using Lambda = std::function<double(int64_t epoch)>;
  LambdaLR(Optimizer& optimizer, Lambda lr_lambda);
  LambdaLR(Optimizer& optimizer, std::vector<Lambda> lr_lambdas);

 protected:
  std::vector<double> lrs_at(int64_t epoch) override;
  const char* name() const override { return "LambdaLR"; }

 private:
  std::vector<Lambda> lambdas_;
};

// Runs schedulers[0] until milestones[0], then schedulers[1] from its epoch 0, and so on:
// at epoch t, scheduler i runs at epoch t - milestones[i - 1]. As in PyTorch every scheduler uses
// the optimizer's initial rates: build them right after the optimizer, the first one first (its
// base rates are taken for all). The SequentialLR steps them; do not step them yourself.
//   auto warmup = std::make_shared<LinearLR>(opt, 0.01, 1.0, 100);
//   auto cosine = std::make_shared<CosineAnnealingLR>(opt, 900);
//   SequentialLR sched(opt, {warmup, cosine}, {100});
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);

 protected:
  std::vector<double> lrs_at(int64_t epoch) override;
  const char* name() const override { return "SequentialLR"; }
  int64_t max_epoch() const override;
  nlohmann::json settings() const override;

 private:
  size_t index_at(int64_t epoch) const;

  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

}  // namespace mixtrain::optim
