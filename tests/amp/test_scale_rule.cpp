// Table-driven tests of GradScaler's update rule and per-optimizer state machine. Each row is
// one iteration (step + update, or update(new_scale)) with the scale, growth tracker and
// hysteresis tracker expected after it, worked out by hand from the rule in
// docs/REFERENCE_AMP.md, "The update rule" (and GRAD_SCALER.md's extensions); the
// non-power-of-two rows spell out the fp32 rounding of scale * factor.
#include <cmath>
#include <limits>

#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
using mt::Tensor;
using mt::testing::expect_error;

namespace {

enum class Ev { Clean, Inf, NaN, SetScale };

struct Row {
  Ev ev;
  double expect_scale;
  int64_t expect_tracker;
  int64_t expect_hysteresis = -1;  // -1: not checked
  double new_scale = 0;            // SetScale
  bool expect_error = false;       // update() raises (error_at_min_scale)
};

double f32(double x) { return static_cast<double>(static_cast<float>(x)); }

void run_table(const mt::amp::GradScalerOptions& options, const std::vector<Row>& rows) {
  mt::amp::GradScaler scaler(options);
  Tensor p = mt::ones({4}).set_requires_grad(true);
  mt::optim::SGD sgd({p}, mt::optim::SGDOptions(0.25));
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    SCOPED_TRACE("row " + std::to_string(i));
    const std::vector<float> before = p.to_vector<float>();
    if (r.ev == Ev::SetScale) {
      scaler.update(r.new_scale);
    } else {
      std::vector<float> g{1, 2, 3, 4};
      if (r.ev == Ev::Inf) g[2] = -std::numeric_limits<float>::infinity();
      if (r.ev == Ev::NaN) g[1] = std::nanf("");
      p.set_grad(mt::from_vector(g, {4}));
      const bool stepped = scaler.step(sgd);
      EXPECT_EQ(stepped, r.ev == Ev::Clean);
      if (!stepped) EXPECT_EQ(p.to_vector<float>(), before);  // skipped: untouched
      if (r.expect_error) {
        EXPECT_THROW(scaler.update(), mt::Error);
      } else {
        scaler.update();
      }
      sgd.zero_grad();
    }
    EXPECT_EQ(scaler.get_scale(), r.expect_scale);
    EXPECT_EQ(scaler.get_growth_tracker(), r.expect_tracker);
    if (r.expect_hysteresis >= 0) EXPECT_EQ(scaler.get_hysteresis_tracker(), r.expect_hysteresis);
  }
}

using O = mt::amp::GradScalerOptions;
constexpr Ev C = Ev::Clean, I = Ev::Inf, N = Ev::NaN;

}  // namespace

TEST(ScaleRule, GrowthIntervalBoundaries) {
  run_table(O().init_scale(8).growth_interval(3), {
                                                      {C, 8, 1},
                                                      {C, 8, 2},
                                                      {C, 16, 0},  // 3rd clean step: grow, reset
                                                      {C, 16, 1},
                                                      {I, 8, 0},   // overflow: back off, reset
                                                      {I, 4, 0},
                                                      {N, 2, 0},   // NaN counts as overflow
                                                      {C, 2, 1},
                                                      {C, 2, 2},
                                                      {I, 1, 0},   // just before the boundary
                                                      {C, 1, 1},
                                                      {C, 1, 2},
                                                      {C, 2, 0},
                                                  });
}

TEST(ScaleRule, DefaultsArePyTorchs) {
  mt::amp::GradScaler s;
  EXPECT_EQ(s.get_scale(), 65536.0);
  EXPECT_EQ(s.get_growth_factor(), 2.0);
  EXPECT_EQ(s.get_backoff_factor(), 0.5);
  EXPECT_EQ(s.get_growth_interval(), 2000);
  EXPECT_TRUE(s.is_enabled());
  std::vector<Row> rows;
  for (int k = 1; k <= 1999; ++k) rows.push_back({C, 65536, k});
  rows.push_back({C, 131072, 0});
  run_table(O(), rows);
}

TEST(ScaleRule, GrowthToNonFiniteIsNotTaken) {
  const double big = std::ldexp(1.0, 127);  // * 2 = 2^128 overflows fp32
  run_table(O().init_scale(big).growth_interval(1), {
                                                        {C, big, 0},
                                                        {C, big, 0},
                                                        {I, big / 2, 0},
                                                        {C, big, 0},
                                                        {C, big, 0},
                                                    });
  const double near_max = f32(3e38);  // * 2 is above FLT_MAX
  run_table(O().init_scale(3e38).growth_interval(2), {{C, near_max, 1}, {C, near_max, 0}, {C, near_max, 1}});
}

TEST(ScaleRule, BackoffChainGoesBelowOne) {
  std::vector<Row> rows;
  for (int k = 1; k <= 24; ++k) rows.push_back({k % 3 ? I : N, std::ldexp(1.0, 16 - k), 0});
  rows.push_back({C, std::ldexp(1.0, -8), 1});
  run_table(O(), rows);  // ends at 2^-8: below 1, as PyTorch allows
}

TEST(ScaleRule, UpdateWithNewScaleKeepsTheTracker) {
  Row set1000{Ev::SetScale, 1000, 2};
  set1000.new_scale = 1000;
  Row set_half{Ev::SetScale, 0.5, 0};
  set_half.new_scale = 0.5;
  run_table(O().init_scale(8).growth_interval(3), {
                                                      {C, 8, 1},
                                                      {C, 8, 2},
                                                      set1000,      // tracker stays 2
                                                      {C, 2000, 0}, // so the next clean step grows
                                                      set_half,
                                                      {I, 0.25, 0},
                                                  });
  mt::amp::GradScaler s;
  EXPECT_THROW(s.update(0.0), mt::Error);
  EXPECT_THROW(s.update(std::numeric_limits<double>::infinity()), mt::Error);
  EXPECT_THROW(s.update(1e39), mt::Error);  // not representable in fp32
}

TEST(ScaleRule, NonPowerOfTwoFactorsRoundThroughFloat32) {
  const double s1 = f32(10 * 0.3), s2 = f32(s1 * 0.3), s3 = f32(s2 * 3.0);
  run_table(O().init_scale(10).growth_factor(3).backoff_factor(0.3).growth_interval(2), {
                                                                                            {I, s1, 0},
                                                                                            {I, s2, 0},
                                                                                            {C, s2, 1},
                                                                                            {C, s3, 0},
                                                                                        });
}

TEST(ScaleRule, HysteresisToleratesConsecutiveOverflows) {
  run_table(O().init_scale(64).growth_interval(2).hysteresis(3), {
                                                                     {I, 64, 0, 2},
                                                                     {I, 64, 0, 1},
                                                                     {I, 32, 0, 0},  // third in a row: back off
                                                                     {I, 16, 0, 0},  // exhausted: every overflow backs off
                                                                     {C, 16, 1, 3},  // a clean step refills it
                                                                     {I, 16, 0, 2},
                                                                     {C, 16, 1, 3},
                                                                     {C, 32, 0, 3},
                                                                     {I, 32, 0, 2},
                                                                     {I, 32, 0, 1},
                                                                     {I, 16, 0, 0},
                                                                 });
}

TEST(ScaleRule, MinAndMaxClamps) {
  run_table(O().init_scale(32).growth_interval(1).min_scale(2).max_scale(64), {
                                                                                  {C, 64, 0},
                                                                                  {C, 64, 0},  // clamped at max_scale
                                                                                  {I, 32, 0},
                                                                                  {I, 16, 0},
                                                                                  {I, 8, 0},
                                                                                  {I, 4, 0},
                                                                                  {I, 2, 0},
                                                                                  {I, 2, 0},  // at min_scale: warning
                                                                                  {N, 2, 0},
                                                                                  {C, 4, 0},
                                                                              });
  Row at_min{I, 2, 0};
  at_min.expect_error = true;
  run_table(O().init_scale(4).growth_interval(1).min_scale(2).error_at_min_scale(true),
            {{I, 2, 0}, at_min, at_min, {C, 4, 0}});  // the error leaves the scaler usable
  run_table(O().init_scale(64).growth_interval(1).max_scale(100), {{C, 100, 0}, {C, 100, 0}, {I, 50, 0}});
  // A floor that is not a power of the backoff: clamped up to it.
  run_table(O().init_scale(5).min_scale(3).growth_interval(5), {{I, 3, 0}, {I, 3, 0}});
}

TEST(ScaleRule, OptionsAreValidated) {
  EXPECT_THROW(mt::amp::GradScaler(O().growth_factor(1.0)), mt::Error);
  EXPECT_THROW(mt::amp::GradScaler(O().backoff_factor(1.0)), mt::Error);
  EXPECT_THROW(mt::amp::GradScaler(O().backoff_factor(0.0)), mt::Error);
  EXPECT_THROW(mt::amp::GradScaler(O().growth_interval(0)), mt::Error);
  EXPECT_THROW(mt::amp::GradScaler(O().init_scale(0)), mt::Error);
  EXPECT_THROW(mt::amp::GradScaler(O().init_scale(std::nan(""))), mt::Error);
  EXPECT_THROW(mt::amp::GradScaler(O().hysteresis(0)), mt::Error);
  EXPECT_THROW(mt::amp::GradScaler(O().min_scale(10).max_scale(5)), mt::Error);
  EXPECT_THROW(mt::amp::GradScaler(O().init_scale(8).min_scale(16)), mt::Error);
  expect_error([] { mt::amp::GradScaler s(O().growth_factor(0.5)); }, "growth_factor");
  mt::amp::GradScaler s;
  EXPECT_THROW(s.set_growth_interval(0), mt::Error);
  s.set_growth_interval(7);
  EXPECT_EQ(s.get_growth_interval(), 7);
}

// ---- state machine ----------------------------------------------------------------------------

namespace {
enum class Call { Unscale, Step, Update, UpdateTo, ZeroGradAndBackward };
struct MachineRow {
  std::vector<Call> calls;
  int failing_call;  // index of the call that must raise, -1 for none
  std::string message;
};
}  // namespace

TEST(ScaleRule, StateMachineErrorsArePyTorchs) {
  const std::vector<MachineRow> table = {
      {{Call::Unscale, Call::Unscale}, 1, "unscale_() has already been called on this optimizer since the last update()."},
      {{Call::Unscale, Call::Step, Call::Unscale}, 2, "unscale_() is being called after step()."},
      {{Call::Step, Call::Step}, 1, "step() has already been called since the last update()."},
      {{Call::Step, Call::Unscale}, 1, "unscale_() is being called after step()."},
      {{Call::Update}, 0, "No inf checks were recorded prior to update."},
      {{Call::Step, Call::Update, Call::Update}, 2, "No inf checks were recorded prior to update."},
      {{Call::Step, Call::UpdateTo, Call::Update}, 2, "No inf checks were recorded prior to update."},
      {{Call::Unscale, Call::Step, Call::Update, Call::Unscale, Call::Step, Call::Update}, -1, ""},
      {{Call::Unscale, Call::Update, Call::Unscale, Call::Update}, -1, ""},  // update after unscale_ alone
      {{Call::UpdateTo, Call::Step, Call::Update}, -1, ""},
      {{Call::ZeroGradAndBackward, Call::Step}, 1, "No inf checks were recorded for this optimizer."},
  };
  for (size_t r = 0; r < table.size(); ++r) {
    SCOPED_TRACE("table row " + std::to_string(r));
    mt::amp::GradScaler scaler;
    Tensor p = mt::ones({3}).set_requires_grad(true);
    mt::optim::Adam adam({p});
    p.set_grad(mt::ones({3}));
    for (size_t i = 0; i < table[r].calls.size(); ++i) {
      auto run = [&] {
        switch (table[r].calls[i]) {
          case Call::Unscale: scaler.unscale_(adam); break;
          case Call::Step: scaler.step(adam); break;
          case Call::Update: scaler.update(); break;
          case Call::UpdateTo: scaler.update(1024.0); break;
          case Call::ZeroGradAndBackward: adam.zero_grad(); break;
        }
      };
      if (static_cast<int>(i) == table[r].failing_call) {
        SCOPED_TRACE("call " + std::to_string(i));
        expect_error(run, table[r].message);
      } else {
        EXPECT_NO_THROW(run()) << "call " << i;
      }
    }
  }
}
