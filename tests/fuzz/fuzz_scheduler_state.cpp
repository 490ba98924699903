// libFuzzer target: the input's first byte picks a learning-rate scheduler (the closed forms,
// OneCycleLR and a SequentialLR), the rest is a state_dict loaded into it, then a few steps.
// Only mixtrain::Error may escape; a rejected load changes neither the epoch nor the rate; the
// optimizer never holds a rate that is not finite.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/json_limits.h"
#include "mixtrain/mixtrain.h"

namespace mt = mixtrain;
namespace optim = mixtrain::optim;

namespace {
std::unique_ptr<optim::LRScheduler> make(uint8_t which, optim::SGD& opt) {
  switch (which % 7) {
    case 0: return std::make_unique<optim::StepLR>(opt, 3, 1e300);
    case 1: return std::make_unique<optim::ExponentialLR>(opt, 1.5);
    case 2: return std::make_unique<optim::MultiStepLR>(opt, std::vector<int64_t>{2, 5, 5}, 1e200);
    case 3: return std::make_unique<optim::LinearLR>(opt, 0.25, 1.0, 4);
    case 4: return std::make_unique<optim::OneCycleLR>(opt, optim::OneCycleLROptions(1.0, 20));
    case 5: {
      auto warm = std::make_shared<optim::LinearLR>(opt, 0.5, 1.0, 3);
      auto decay = std::make_shared<optim::ExponentialLR>(opt, 2.0);
      return std::make_unique<optim::SequentialLR>(opt, std::vector<std::shared_ptr<optim::LRScheduler>>{warm, decay},
                                                   std::vector<int64_t>{3});
    }
    default: return std::make_unique<optim::CosineAnnealingLR>(opt, 10, 1e-4);
  }
}
void check_rate(const optim::SGD& opt) {
  if (!std::isfinite(opt.param_groups()[0].options().get_lr())) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  mt::Tensor w = mt::ones({2}).set_requires_grad(true);
  optim::SGD opt({w}, optim::SGDOptions(0.1).momentum(0.9));
  try {
    const std::unique_ptr<optim::LRScheduler> sched = make(data[0], opt);
    const nlohmann::json doc = mt::detail::parse_json_bounded(text, "fuzz");
    const int64_t epoch = sched->last_epoch();
    const double lr = opt.param_groups()[0].options().get_lr();
    try {
      sched->load_state_dict(doc);
    } catch (const mt::Error&) {
      if (sched->last_epoch() != epoch || opt.param_groups()[0].options().get_lr() != lr) __builtin_trap();
      throw;
    }
    check_rate(opt);
    for (int i = 0; i < 3; ++i) {
      try {
        sched->step(true);
      } catch (const mt::Error&) {
      }
      check_rate(opt);
    }
  } catch (const mt::Error&) {
  }
  return 0;
}
