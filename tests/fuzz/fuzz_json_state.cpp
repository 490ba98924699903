// libFuzzer target: the input's first byte picks a JSON loader (policy table, GradScaler,
// AdamW, SGD, scheduler), the rest is the document, parsed as every reader parses JSON. Only
// mixtrain::Error may escape; a rejected document changes nothing.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/json_limits.h"
#include "mixtrain/mixtrain.h"

namespace mt = mixtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::vector<mt::Tensor> params{mt::full({3}, 1.0).set_requires_grad(true), mt::full({2}, 2.0).set_requires_grad(true)};
  try {
    const nlohmann::json doc = mt::detail::parse_json_bounded(text, "fuzz");
    switch (data[0] % 5) {
      case 0: {
        const nlohmann::json before = mt::amp::policy_table_to_json();
        try {
          mt::amp::load_policy_table(doc);
        } catch (const mt::Error&) {
          if (mt::amp::policy_table_to_json() != before) __builtin_trap();
        }
        mt::amp::reset_policy_table();
        break;
      }
      case 1: {
        mt::amp::GradScaler s(mt::amp::GradScalerOptions().hysteresis(2));
        const nlohmann::json before = s.state_dict();
        try {
          s.load_state_dict(doc);
          mt::amp::GradScaler t(mt::amp::GradScalerOptions().hysteresis(2));
          t.load_state_dict(s.state_dict());  // what a writer writes, its reader accepts
        } catch (const mt::Error&) {
          if (s.state_dict() != before) __builtin_trap();
        }
        break;
      }
      case 2:
      case 3: {
        std::unique_ptr<mt::optim::Optimizer> opt;
        if (data[0] % 5 == 2) opt = std::make_unique<mt::optim::AdamW>(params, mt::optim::AdamWOptions(1e-3));
        else opt = std::make_unique<mt::optim::SGD>(params, mt::optim::SGDOptions(0.1).momentum(0.9));
        mt::io::NamedTensors tensors;
        for (int i = 0; i < 2; ++i)
          for (const char* n : {"exp_avg", "exp_avg_sq", "momentum_buffer"})
            tensors.emplace_back("state." + std::to_string(i) + "." + n, mt::zeros(params[static_cast<size_t>(i)].shape()));
        try {
          opt->load_state_dict(doc, tensors);
        } catch (const mt::Error&) {
        }
        break;
      }
      default: {
        mt::optim::SGD opt(params, mt::optim::SGDOptions(0.1));
        mt::optim::CosineAnnealingLR sched(opt, 10);
        sched.load_state_dict(doc);
        break;
      }
    }
  } catch (const mt::Error&) {
  }
  return 0;
}
