#pragma once
// How the nn modules name a tensor in their errors: its summary, or that it is undefined.
#include <string>

#include "mixtrain/core/tensor.h"

namespace mixtrain::nn::detail {

inline std::string describe(const Tensor& t) { return t.defined() ? t.summary() : std::string("an undefined tensor"); }

}  // namespace mixtrain::nn::detail
