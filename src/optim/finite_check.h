#pragma once
// Whether tensors hold only finite values: the trainer's check of the parameters after each
// optimizer step and the checkpoint writer's of the optimizer state. The scan is one fused
// read-only pass per (device, dtype) (the amp kernel's inf/NaN check at inv_scale 1, which writes
// nothing) into device flags: no host synchronisation until the flag is read. The search by name
// copies each tensor to the host: for the rare case the flag is set.
#include <string>
#include <utility>
#include <vector>

#include "mixtrain/core/tensor.h"

namespace mixtrain::optim::detail {

using NamedTensorList = std::vector<std::pair<std::string, Tensor>>;

// A 0-dim fp32 flag, nonzero when some element of `tensors` is inf or NaN; undefined when there
// is nothing to scan (meta tensors, and dtypes other than fp64/fp32/fp16/bf16, are not scanned).
Tensor scan_non_finite(const std::vector<Tensor>& tensors);

// The same scan into flags made beforehand, one per device (`flags`: 0-dim fp32, set to 1 by the
// scan of that device's tensors and never cleared; `ones`: 0-dim fp32 ones beside them), so that
// a step served from a memory plan allocates nothing for it. Returns false when a tensor's
// device has no flag.
bool scan_non_finite_into(const std::vector<Tensor>& tensors, const std::vector<Tensor>& flags,
                          const std::vector<Tensor>& ones);

// The name of the first tensor holding an inf or NaN ("" when all are finite); `value` gets
// which value and where ("NaN at element 3 of 40").
std::string first_non_finite(const NamedTensorList& named, std::string* value);

}  // namespace mixtrain::optim::detail
