#pragma once
// How the distributed tests compare a rank's tensors with a reference: to summation order (the
// largest difference relative to max(1, |reference|)) or byte for byte.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "mixtrain/mixtrain.h"

namespace mt_dist_test {

inline double max_rel_diff(const std::vector<mixtrain::Tensor>& a, const std::vector<mixtrain::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto x = a[i].to(mixtrain::kFloat64).to_vector<double>();
    const auto y = b[i].to(mixtrain::kFloat64).to_vector<double>();
    for (size_t k = 0; k < x.size(); ++k) worst = std::max(worst, std::abs(x[k] - y[k]) / std::max(1.0, std::abs(y[k])));
  }
  return worst;
}

inline bool bit_equal(const std::vector<mixtrain::Tensor>& a, const std::vector<mixtrain::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const mixtrain::Tensor x = a[i].contiguous(), y = b[i].contiguous();
    if (x.nbytes() != y.nbytes() || std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) != 0) return false;
  }
  return true;
}

}  // namespace mt_dist_test
