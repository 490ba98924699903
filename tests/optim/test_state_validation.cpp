// Optimizer state documents are checked for ranges and consistency, not only types: a state
// that would break training later (a step past 2^53, half of Adam's moments, more per-parameter
// steps than optimizer steps, nesting past the JSON depth limit) is rejected whole, naming the
// field, with nothing applied.
#include <cmath>
#include <limits>

#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
using mt::Tensor;
using mt::testing::expect_error;

namespace {

struct Model {
  std::vector<Tensor> params{mt::full({3}, 1.0).set_requires_grad(true), mt::full({2}, -1.0).set_requires_grad(true)};
  void step(mt::optim::Optimizer& opt) {
    opt.zero_grad();
    ((params[0] * params[0]).sum() + (params[1] * 3.0).sum()).backward();
    opt.step();
  }
};

// Loading `doc` into a fresh optimizer fails naming `parts`, and leaves it as it was.
template <class Opt, class Options>
void expect_rejected(const nlohmann::json& doc, const mt::io::NamedTensors& tensors, Options options,
                     std::initializer_list<std::string> parts) {
  Model m;
  Opt fresh(m.params, options);
  const nlohmann::json before = fresh.state_dict();
  expect_error([&] { fresh.load_state_dict(doc, tensors); }, parts);
  EXPECT_EQ(fresh.state_dict(), before);
  EXPECT_TRUE(fresh.state_tensors().empty());
}

}  // namespace

TEST(OptimizerStateValidation, StepCountsOutOfRangeAreRejected) {
  Model m;
  mt::optim::Adam adam(m.params, mt::optim::AdamOptions(1e-2));
  for (int i = 0; i < 3; ++i) m.step(adam);
  const nlohmann::json good = adam.state_dict();
  const mt::io::NamedTensors tensors = adam.state_tensors();
  for (const int64_t step : {std::numeric_limits<int64_t>::max(), (int64_t{1} << 53) + 1, int64_t{-1}}) {
    nlohmann::json doc = good;
    doc["state"]["0"]["step"] = step;
    doc["steps_taken"] = std::numeric_limits<int64_t>::max();
    expect_rejected<mt::optim::Adam>(doc, tensors, mt::optim::AdamOptions(1e-2), {"state[\"0\"].step"});
  }
  nlohmann::json doc = good;
  doc["steps_taken"] = std::numeric_limits<int64_t>::max();
  expect_rejected<mt::optim::Adam>(doc, tensors, mt::optim::AdamOptions(1e-2), {"steps_taken"});
  doc = good;
  doc["steps_skipped"] = -3;
  expect_rejected<mt::optim::Adam>(doc, tensors, mt::optim::AdamOptions(1e-2), {"steps_skipped"});
}

TEST(OptimizerStateValidation, PerParameterStepsCannotExceedStepsTaken) {
  Model m;
  mt::optim::SGD sgd(m.params, mt::optim::SGDOptions(0.1).momentum(0.9));
  for (int i = 0; i < 4; ++i) m.step(sgd);
  nlohmann::json doc = sgd.state_dict();
  EXPECT_EQ(doc["steps_taken"], 4);
  doc["steps_taken"] = 2;
  expect_rejected<mt::optim::SGD>(doc, sgd.state_tensors(), mt::optim::SGDOptions(0.1).momentum(0.9),
                                  {"state", "step = 4", "steps_taken = 2"});
  // The same numbers in a consistent document load.
  Model m2;
  mt::optim::SGD ok(m2.params, mt::optim::SGDOptions(0.1).momentum(0.9));
  ok.load_state_dict(sgd.state_dict(), sgd.state_tensors());
  EXPECT_EQ(ok.state_dict(), sgd.state_dict());
}

TEST(OptimizerStateValidation, PartialAdamStateIsRejected) {
  Model m;
  mt::optim::AdamW adamw(m.params, mt::optim::AdamWOptions(1e-2));
  m.step(adamw);
  const nlohmann::json good = adamw.state_dict();
  const mt::io::NamedTensors tensors = adamw.state_tensors();
  for (const std::string keep : {"exp_avg", "exp_avg_sq"}) {
    nlohmann::json doc = good;
    doc["state"]["1"]["tensors"] = {keep};
    mt::io::NamedTensors partial;
    for (const auto& [n, t] : tensors)
      if (n.rfind("state.1.", 0) != 0 || n == "state.1." + keep) partial.emplace_back(n, t);
    expect_rejected<mt::optim::AdamW>(doc, partial, mt::optim::AdamWOptions(1e-2),
                                      {"state[\"1\"].tensors", "partial", "exp_avg_sq", "1 of them"});
  }
}

TEST(OptimizerStateValidation, DeepDocumentsAreRejectedBeforeAnyRecursion) {
  Model m;
  mt::optim::Adam adam(m.params, mt::optim::AdamOptions(1e-2));
  nlohmann::json doc = adam.state_dict();
  mt::testing::nest_arrays_into(doc["param_groups"][0]["lr"], 100000);
  expect_rejected<mt::optim::Adam>(doc, {}, mt::optim::AdamOptions(1e-2), {"Adam state_dict", "deeper"});
  mt::optim::CosineAnnealingLR sched(adam, 10);
  nlohmann::json s = sched.state_dict();
  mt::testing::nest_arrays_into(s["base_lrs"], 100000);
  expect_error([&] { sched.load_state_dict(s); }, "deeper");
}
