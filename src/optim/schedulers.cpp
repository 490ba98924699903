// LinearLR, StepLR, MultiStepLR, ExponentialLR, LambdaLR and SequentialLR in PyTorch's closed forms.
#include "mixtrain/optim/schedulers.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "mixtrain/base/error.h"

namespace mixtrain::optim {

namespace {
void check_gamma(const char* who, double gamma) {
  MT_CHECK(std::isfinite(gamma) && gamma > 0.0, who, ": gamma must be a finite value > 0, got ", gamma);
}
std::vector<double> scaled(const std::vector<double>& base, double factor) {
  std::vector<double> out;
  for (double b : base) out.push_back(b * factor);
  return out;
}
}  // namespace

// ---- LinearLR ---------------------------------------------------------------------------------

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(optimizer), start_factor_(start_factor), end_factor_(end_factor), total_iters_(total_iters) {
  MT_CHECK(start_factor > 0.0 && start_factor <= 1.0, "LinearLR: start_factor must be in (0, 1], got ", start_factor);
  MT_CHECK(end_factor >= 0.0 && end_factor <= 1.0, "LinearLR: end_factor must be in [0, 1], got ", end_factor);
  MT_CHECK(total_iters > 0, "LinearLR: total_iters must be > 0, got ", total_iters);
  initialize();
}

std::vector<double> LinearLR::lrs_at(int64_t epoch) {
  const double t = static_cast<double>(std::min(epoch, total_iters_));
  return scaled(base_lrs_, start_factor_ + (end_factor_ - start_factor_) * t / static_cast<double>(total_iters_));
}

nlohmann::json StepLR::settings() const { return {{"step_size", step_size_}, {"gamma", gamma_}}; }
nlohmann::json MultiStepLR::settings() const { return {{"milestones", milestones_}, {"gamma", gamma_}}; }
nlohmann::json ExponentialLR::settings() const { return {{"gamma", gamma_}}; }

nlohmann::json LinearLR::settings() const {
  return {{"start_factor", start_factor_}, {"end_factor", end_factor_}, {"total_iters", total_iters_}};
}

// ---- StepLR, MultiStepLR, ExponentialLR --------------------------------------------------------

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  MT_CHECK(step_size > 0, "StepLR: step_size must be > 0, got ", step_size);
  check_gamma("StepLR", gamma);
  initialize();
}

std::vector<double> StepLR::lrs_at(int64_t epoch) {
  return scaled(base_lrs_, std::pow(gamma_, static_cast<double>(epoch / step_size_)));
}

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer), milestones_(std::move(milestones)), gamma_(gamma) {
  for (int64_t m : milestones_) MT_CHECK(m >= 0, "MultiStepLR: milestones must be >= 0, got ", m);
  std::sort(milestones_.begin(), milestones_.end());
  check_gamma("MultiStepLR", gamma);
  initialize();
}

std::vector<double> MultiStepLR::lrs_at(int64_t epoch) {
  // bisect_right: the milestones already reached.
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin();
  return scaled(base_lrs_, std::pow(gamma_, static_cast<double>(passed)));
}

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma) : LRScheduler(optimizer), gamma_(gamma) {
  check_gamma("ExponentialLR", gamma);
  initialize();
}

std::vector<double> ExponentialLR::lrs_at(int64_t epoch) {
  return scaled(base_lrs_, std::pow(gamma_, static_cast<double>(epoch)));
}

// ---- LambdaLR ---------------------------------------------------------------------------------

LambdaLR::LambdaLR(Optimizer& optimizer, Lambda lr_lambda)
    : LambdaLR(optimizer, std::vector<Lambda>(optimizer.param_groups().size(), lr_lambda)) {}

LambdaLR::LambdaLR(Optimizer& optimizer, std::vector<Lambda> lr_lambdas)
    : LRScheduler(optimizer), lambdas_(std::move(lr_lambdas)) {
  MT_CHECK(lambdas_.size() == optimizer.param_groups().size(), "LambdaLR: ", lambdas_.size(),
           " lambdas for an optimizer of ", optimizer.param_groups().size(), " parameter groups");
  for (const auto& f : lambdas_) MT_CHECK(static_cast<bool>(f), "LambdaLR: empty lr_lambda");
  initialize();
}

std::vector<double> LambdaLR::lrs_at(int64_t epoch) {
  std::vector<double> out;
  for (size_t i = 0; i < base_lrs_.size(); ++i) {
    const double f = lambdas_[i](epoch);
    MT_CHECK(std::isfinite(f) && f >= 0.0, "LambdaLR: lr_lambda(", epoch, ") of group ", i,
             " returned ", f, "; it must be a finite factor >= 0");
    out.push_back(base_lrs_[i] * f);
  }
  return out;
}

// ---- SequentialLR -----------------------------------------------------------------------------

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  MT_CHECK(!schedulers_.empty(), "SequentialLR: no schedulers");
  MT_CHECK(milestones_.size() + 1 == schedulers_.size(), "SequentialLR: ", schedulers_.size(),
           " schedulers need ", schedulers_.size() - 1, " milestones, got ", milestones_.size());
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    MT_CHECK(schedulers_[i] != nullptr, "SequentialLR: scheduler ", i, " is null");
    MT_CHECK(&schedulers_[i]->optimizer_ == &optimizer, "SequentialLR: scheduler ", i, " (",
             schedulers_[i]->name(), ") drives another optimizer");
  }
  for (size_t i = 0; i < milestones_.size(); ++i)
    MT_CHECK(milestones_[i] > (i ? milestones_[i - 1] : 0), "SequentialLR: milestones must be positive and ",
             "increasing, got ", nlohmann::json(milestones_).dump());
  // Building the schedulers moved the rates; start again from the first one's base rates.
  auto& groups = optimizer.param_groups();
  const std::vector<double>& base = schedulers_[0]->base_lrs_;
  for (size_t i = 0; i < groups.size() && i < base.size(); ++i) groups[i].options().set_lr(base[i]);
  initialize();
}

size_t SequentialLR::index_at(int64_t epoch) const {
  return static_cast<size_t>(std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin());
}

std::vector<double> SequentialLR::lrs_at(int64_t epoch) {
  const size_t i = index_at(epoch);
  LRScheduler& s = *schedulers_[i];
  s.base_lrs_ = base_lrs_;
  return s.lrs_at(epoch - (i ? milestones_[i - 1] : 0));
}

int64_t SequentialLR::max_epoch() const {
  const int64_t last = schedulers_.back()->max_epoch();
  const int64_t offset = milestones_.empty() ? 0 : milestones_.back();
  return last > std::numeric_limits<int64_t>::max() - offset ? std::numeric_limits<int64_t>::max() : last + offset;
}

nlohmann::json SequentialLR::settings() const {
  nlohmann::json children = nlohmann::json::array();
  for (const auto& s : schedulers_) {
    nlohmann::json c = s->settings();
    c["type"] = s->name();
    children.push_back(c);
  }
  return {{"milestones", milestones_}, {"schedulers", children}};
}

}  // namespace mixtrain::optim
