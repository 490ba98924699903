#pragma once
// The training loop's check that the optimizer left every parameter finite: one fused read-only
// scan after the step (optim/finite_check.h), whose flag is read with the step's loss; the
// parameters are searched by name only when it is set.
#include <cstdint>
#include <vector>

#include "mixtrain/core/tensor.h"
#include "mixtrain/nn/module.h"

namespace mixtrain::train {

class FiniteParams {
 public:
  // The flags are made here, before any step: a planned step allocates nothing for the scan.
  explicit FiniteParams(const nn::Module& model);
  // Queues the scan of the parameters after an update (flags cleared first).
  void scan();
  // Reads the flags back (after the step's loss: no extra wait): false if some parameter holds
  // an inf or NaN.
  bool all_finite() const;
  // Throws naming the step and the first parameter (dotted name) holding an inf or NaN.
  [[noreturn]] void refuse(int64_t step) const;

 private:
  const nn::Module& model_;
  std::vector<Tensor> flags_, ones_;  // one each per device of the parameters (none on meta)
};

}  // namespace mixtrain::train
