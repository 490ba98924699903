#pragma once
// Shared pieces of the autocast tests.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mixtrain::amp_test {

// Every test starts from the default policy table, empty cache and zero counters, and leaves
// them so even when it fails half-way.
class AmpTest : public ::testing::Test {
 protected:
  void SetUp() override { restore(); }
  void TearDown() override { restore(); }
  static void restore() {
    amp::reset_policy_table();
    amp::clear_autocast_cache();
    amp::reset_autocast_stats();
  }
};

inline std::vector<float> values_of(const Tensor& t) { return t.to(kFloat32).contiguous().to_vector<float>(); }

using mixtrain::testing::expect_error;

}  // namespace mixtrain::amp_test
