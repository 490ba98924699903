// Sizes that wrap: every shape -> element count -> byte count is checked (a clear Error naming
// the shape, never a wrapped count or a crash).
#include <cmath>
#include <limits>

#include "support/testing.h"

namespace mt = mixtrain;
using mt::testing::expect_error;

namespace {
constexpr int64_t kBig = int64_t{1} << 32;
}  // namespace

TEST(SizeLimits, ElementCountsThatOverflowAreErrors) {
  expect_error([] { mt::checked_numel({kBig, kBig}, "op"); }, {"op", "[4294967296, 4294967296]", "2^63"});
  expect_error([] { mt::checked_numel({2, -3}, "op"); }, {"op", "negative size -3", "[2, -3]"});
  // A zero anywhere makes the product 0, even after an overflowing prefix.
  EXPECT_EQ(mt::checked_numel({kBig, kBig, 0}, "op"), 0);
  EXPECT_EQ(mt::checked_numel({}, "op"), 1);
  EXPECT_EQ(mt::checked_numel({3, 5, 7}, "op"), 105);
  // Every element count that fits also fits as bytes only within PTRDIFF_MAX.
  EXPECT_EQ(mt::checked_nbytes({int64_t{1} << 20, 3}, 4, "op"), size_t{12} << 20);
  expect_error([] { mt::checked_nbytes({(int64_t{1} << 62) + 1}, 4, "op"); }, {"op", "4-byte", "bytes"});
  expect_error([] { mt::checked_nbytes({int64_t{1} << 61}, 8, "op"); }, "8-byte");
}

TEST(SizeLimits, FactoriesRejectShapesWhoseBytesWrap) {
  // Each of these once returned a tensor with a wrapped byte count (then crashed on use).
  expect_error([] { mt::zeros({(int64_t{1} << 62) + 1}); }, {"empty", "[4611686018427387905]"});
  expect_error([] { mt::empty({kBig, kBig}); }, {"empty", "[4294967296, 4294967296]"});
  for (mt::DType dt : {mt::kFloat16, mt::kFloat32, mt::kFloat64, mt::kInt64, mt::kBool}) {
    if (mt::element_size(dt) == 1) continue;  // no wrap possible past the count check
    const int64_t elems = std::numeric_limits<int64_t>::max() / static_cast<int64_t>(mt::element_size(dt)) + 1;
    expect_error([&] { mt::empty({elems}, mt::TensorOptions(dt)); }, "bytes");
    expect_error([&] { mt::ones({2, elems / 2 + 1}, mt::TensorOptions(dt)); }, "bytes");
  }
  // Empty, but with strides that would overflow: an error, not undefined arithmetic.
  expect_error([] { mt::empty({0, kBig, kBig, 2}); }, {"strides", "[0, 4294967296, 4294967296, 2]"});
  EXPECT_EQ(mt::empty({kBig, kBig, 0}).numel(), 0);
  expect_error([] { mt::empty({3, -1}); }, {"negative size -1", "[3, -1]"});
  expect_error([] { mt::rand({-2}); }, "negative size");
  expect_error([] { mt::randn({kBig, kBig, 2}); }, "2^63");
}

TEST(SizeLimits, ViewsRejectElementCountsThatWrap) {
  mt::Tensor x = mt::zeros({1, 1});
  expect_error([&] { x.expand({kBig, kBig}); }, {"[4294967296, 4294967296]", "2^63"});
  expect_error([&] { x.expand({int64_t{1} << 62, 4}); }, "2^63");
  expect_error([&] { x.expand({-5, 1}); }, {"expand", "-5"});
  mt::Tensor y = mt::zeros({4});
  expect_error([&] { y.reshape({kBig, kBig, 0, -1}); }, "is invalid for input of shape [4]");
  expect_error([&] { y.view({-1, int64_t{1} << 62, 4}); }, "view");
  EXPECT_EQ(x.expand({kBig, 3}).numel(), kBig * 3);  // large but representable: fine as a view
}

TEST(SizeLimits, ArangeRejectsNonFiniteAndHugeRanges) {
  expect_error([] { mt::arange(0, INFINITY); }, {"arange", "finite"});
  expect_error([] { mt::arange(0, NAN); }, {"arange", "finite"});
  expect_error([] { mt::arange(-INFINITY, 0, 1); }, "finite");
  expect_error([] { mt::arange(0, 1, INFINITY); }, "finite");
  expect_error([] { mt::arange(0, 1e300, 1); }, {"arange", "too many"});
  expect_error([] { mt::arange(0, 1, 1e-300); }, {"arange", "too many"});
  expect_error([] { mt::arange(0, 1e19, 1); }, "too many");
  EXPECT_EQ(mt::arange(0, 3).numel(), 3);
}
