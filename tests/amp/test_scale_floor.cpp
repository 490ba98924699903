// The scale floor: no scale whose inverse overflows float32 is ever taken (options,
// load_state_dict, update(new_scale), a run of overflowing iterations), and the unscale pass
// checks the unscaled values too, so a clean step after a collapse never writes inf/NaN weights.
#include <cfloat>
#include <cmath>
#include <limits>

#include "backends/amp.h"
#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
using mt::Tensor;
using mt::testing::expect_error;
using O = mt::amp::GradScalerOptions;

namespace {

bool all_finite(const Tensor& t) {
  for (float v : t.to_vector<float>())
    if (!std::isfinite(v)) return false;
  return true;
}

// One iteration with the given (scaled) gradient: step + update; says whether the step was taken.
bool iterate(mt::amp::GradScaler& scaler, mt::optim::SGD& opt, Tensor& w, const std::vector<float>& g) {
  w.set_grad(mt::from_vector(g, {static_cast<int64_t>(g.size())}));
  const bool taken = scaler.step(opt);
  scaler.update();
  opt.zero_grad();
  return taken;
}

}  // namespace

TEST(ScaleFloor, IsFloat32sSmallestNormalWithAFiniteInverse) {
  EXPECT_EQ(mt::amp::kScaleFloor, static_cast<double>(FLT_MIN));
  EXPECT_TRUE(std::isfinite(static_cast<float>(1.0 / mt::amp::kScaleFloor)));
  EXPECT_EQ(mt::amp::kScaleFloor, std::ldexp(1.0, -126));  // reached exactly by halving a power of two
}

TEST(ScaleFloor, OptionsRefuseScalesWhoseInverseOverflows) {
  for (double s : {1e-39, 2.9e-39, 1e-45}) {
    SCOPED_TRACE(s);
    expect_error([&] { mt::amp::GradScaler g(O().init_scale(s)); }, {"init_scale", "inverse overflows float32"});
  }
  // Finite inverse but subnormal: below the floor.
  expect_error([] { mt::amp::GradScaler g(O().init_scale(1e-38)); }, {"init_scale", "[min_scale, max_scale]"});
  mt::amp::GradScaler at_floor(O().init_scale(mt::amp::kScaleFloor));
  EXPECT_EQ(at_floor.get_scale(), mt::amp::kScaleFloor);
  // A floor set below kScaleFloor (0 included, which meant "none") means kScaleFloor.
  for (double m : {0.0, 1e-40}) {
    mt::amp::GradScaler g(O().min_scale(m).init_scale(mt::amp::kScaleFloor));
    EXPECT_EQ(g.get_scale(), mt::amp::kScaleFloor);
    EXPECT_THROW(mt::amp::GradScaler(O().min_scale(m).init_scale(1e-39)), mt::Error);
  }
  EXPECT_THROW(mt::amp::GradScaler(O().min_scale(-1.0)), mt::Error);
}

TEST(ScaleFloor, LoadStateDictRefusesScalesWhoseInverseOverflowsAndChangesNothing) {
  mt::amp::GradScaler s(O().init_scale(8));
  for (double bad : {1e-39, 2.9e-39, 1e-44}) {
    SCOPED_TRACE(bad);
    nlohmann::json d = nlohmann::json::parse(
        R"({"scale": 1.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000, "_growth_tracker": 0})");
    d["scale"] = bad;
    expect_error([&] { s.load_state_dict(d); }, {"GradScaler.load_state_dict.scale", "inverse overflows float32"});
    EXPECT_EQ(s.get_scale(), 8.0);
  }
  // PyTorch's documents, down to a scale at the floor, still load.
  s.load_state_dict(nlohmann::json::parse(
      R"({"scale": 1.1754943508222875e-38, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000, "_growth_tracker": 5})"));
  EXPECT_EQ(s.get_scale(), mt::amp::kScaleFloor);
  s.load_state_dict(nlohmann::json::parse(
      R"({"scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000, "_growth_tracker": 0})"));
  EXPECT_EQ(s.get_scale(), 65536.0);
}

TEST(ScaleFloor, UpdateWithNewScaleRefusesScalesWhoseInverseOverflows) {
  mt::amp::GradScaler s;
  expect_error([&] { s.update(2.9e-39); }, {"new_scale", "inverse overflows float32"});
  expect_error([&] { s.update(1e-38); }, "[min_scale, max_scale]");
  EXPECT_EQ(s.get_scale(), 65536.0);
  s.update(mt::amp::kScaleFloor);
  EXPECT_EQ(s.get_scale(), mt::amp::kScaleFloor);
}

TEST(ScaleFloor, ACleanStepAfterARunOfOverflowsLeavesFiniteWeights) {
  // 200 overflowing iterations in a row (a run of bad batches) would take PyTorch's scale to 0
  // (65536 * 2^-k). Here it stops at the floor, and the next clean steps keep the weights finite.
  mt::amp::GradScaler scaler;
  Tensor w = mt::ones({4}).set_requires_grad(true);
  mt::optim::SGD opt({w}, mt::optim::SGDOptions(0.5));
  const float inf = std::numeric_limits<float>::infinity();
  for (int i = 0; i < 200; ++i) ASSERT_FALSE(iterate(scaler, opt, w, {1, inf, 3, 4})) << "iteration " << i;
  EXPECT_EQ(scaler.get_scale(), mt::amp::kScaleFloor);
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{1, 1, 1, 1}));

  // Gradients as computed with the tiny scale: unscaled to 0.5, 1, ...; the step is taken.
  const float s = static_cast<float>(mt::amp::kScaleFloor);
  EXPECT_TRUE(iterate(scaler, opt, w, {0.5f * s, 1 * s, 0, 2 * s}));
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{0.75f, 0.5f, 1.0f, 0.0f}));

  // Finite gradients whose unscaled values overflow (4 * 2^126 = 2^128): skipped, not applied.
  EXPECT_FALSE(iterate(scaler, opt, w, {1, 2, 3, 4}));
  EXPECT_TRUE(all_finite(w));
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{0.75f, 0.5f, 1.0f, 0.0f}));
}

TEST(ScaleFloor, UnscaleKernelFlagsValuesThatOverflowWhenUnscaled) {
  // The backend rule itself: finite gradients times an inverse scale that makes them inf (or a
  // non-finite inverse, 0 * inf = NaN) raise found_inf, whatever the gradient dtype.
  for (mt::DType dt : {mt::kFloat32, mt::kFloat64}) {
    for (double inv : {std::ldexp(1.0, 126), static_cast<double>(std::numeric_limits<float>::infinity())}) {
      SCOPED_TRACE(std::string(mt::dtype_name(dt)) + " inv " + std::to_string(inv));
      Tensor g = mt::from_vector(std::vector<double>{0.0, 1e-3, 8.0}, {3}).to(dt);
      if (dt == mt::kFloat64 && std::isfinite(inv)) g = mt::from_vector(std::vector<double>{0.0, 1e-3, 1e300}, {3});
      Tensor found = mt::zeros({}, mt::kFloat32);
      mt::backends::non_finite_check_and_unscale(
              mt::DeviceType::CPU, {g}, {g}, mt::full({}, inv, mt::kFloat32), found, Tensor());
      EXPECT_EQ(found.item<float>(), 1.0f);
    }
  }
  // In range: nothing flagged.
  Tensor g = mt::from_vector(std::vector<float>{0.0f, 1e-30f, 2.0f}, {3});
  Tensor found = mt::zeros({}, mt::kFloat32);
  mt::backends::non_finite_check_and_unscale(
          mt::DeviceType::CPU, {g}, {g}, mt::full({}, std::ldexp(1.0, 100), mt::kFloat32), found, Tensor());
  EXPECT_EQ(found.item<float>(), 0.0f);
}
