// FP8 under data parallelism in real processes: with DDP::sync_fp8 the step's amaxes are reduced
// with MAX across ranks, so ranks whose data differ in magnitude still compute the same scales
// (and those of the larger amaxes); without it they diverge. After set_process_group (an elastic
// job's next generation) the reduction goes over the new group.
#include <gtest/gtest.h>

#include <cstdlib>

#include "mixtrain/distributed/ddp.h"
#include "mixtrain/distributed/process_group.h"
#include "mixtrain/mixtrain.h"
#include "ranks.h"

namespace mt = mixtrain;
namespace dist = mixtrain::distributed;
namespace nn = mixtrain::nn;
using mt_dist_test::run_ranks;

namespace {

mt::nn::Sequential make_model() {
  mt::manual_seed(3);
  return mt::nn::Sequential(mt::nn::Linear(16, 32), mt::nn::GELU(), mt::nn::Linear(32, 16));
}

// One FP8 step and the scales' update; rank 1's inputs are ten times rank 0's, so their amaxes
// differ. Returns this rank's input amax.
float fp8_step(nn::DistributedDataParallel& ddp, mt::amp::Fp8Scaling& fp8, const mt::amp::Fp8Recipe& recipe,
               mt::optim::Optimizer& opt, int step, int rank) {
  mt::Generator g;
  g.manual_seed(static_cast<uint64_t>(100 * step + rank));
  const mt::Tensor x = mt::randn({8, 16}, g) * (rank == 1 ? 10.0 : 1.0), y = mt::randn({8, 16}, g);
  opt.zero_grad();
  mt::Tensor loss;
  {
    mt::amp::Fp8AutocastGuard scope(mt::DeviceType::CPU, recipe);
    loss = mt::nn::functional::mse_loss(ddp.forward(x), y);
  }
  loss.backward();
  opt.step();
  fp8.update();
  return mt::max(mt::abs(x)).item<float>();
}

// Every rank's FP8 scales, then the input amax of layer 0, gathered over the DDP's group.
std::vector<std::vector<double>> gather_scales(nn::DistributedDataParallel& ddp, mt::amp::Fp8Scaling& fp8) {
  std::vector<double> mine;
  for (const auto& [n, t] : ddp.module().state_dict())
    if (n.find("fp8_scale") != std::string::npos)
      for (float v : t.to_vector<float>()) mine.push_back(v);
  mine.push_back(fp8.stats()[0].amax[0]);
  std::vector<std::vector<double>> out;
  for (const mt::Tensor& t : ddp.group().all_gather(
           mt::from_vector<double>(mine, {static_cast<int64_t>(mine.size())}, mt::TensorOptions(mt::kFloat64))))
    out.push_back(t.to_vector<double>());
  return out;
}

}  // namespace

MT_SCENARIO(fp8_amax_max_reduction) {
  dist::init_process_group();
  const int r = dist::rank();
  const bool sync = std::getenv("MT_NO_FP8_SYNC") == nullptr;
  auto model = make_model();
  const mt::amp::Fp8Recipe recipe = mt::amp::Fp8Recipe().history_len(2);
  mt::amp::Fp8Scaling fp8(model, recipe);
  nn::DistributedDataParallel ddp(model);
  if (sync) ddp.sync_fp8(fp8);
  mt::optim::SGD opt(model->parameters(), mt::optim::SGDOptions(0.01));
  float own_amax = 0;
  for (int step = 0; step < 3; ++step) own_amax = fp8_step(ddp, fp8, recipe, opt, step, r);
  // Every rank's scales and the input amax both ranks used last.
  const auto all = gather_scales(ddp, fp8);
  const auto &a = all[0], &b = all[1];
  std::fprintf(stderr, "rank %d: own input amax %g, layer 0 input amax %g (rank 0) %g (rank 1)\n", r, own_amax,
               a.back(), b.back());
  if (!sync) return a == b ? 1 : 43;  // the control: the ranks disagree without the reduction
  SC_CHECK(a == b);
  // The reduced amax is the larger rank's (rank 1's inputs), not this rank's own.
  const float rank1_amax = static_cast<float>(b.back());
  if (r == 1) SC_CHECK(rank1_amax == own_amax);
  else SC_CHECK(rank1_amax > own_amax);
  return 0;
}

// A step on the first group, then the DDP moves to a second group of the same ranks and the first
// is aborted, as an elastic job's failed generation is: the next steps' amaxes are reduced over
// the second (over the first they would fail: it refuses every call), so the scales still agree.
MT_SCENARIO(fp8_sync_follows_the_new_group) {
  auto first = dist::new_process_group();
  const int r = first->rank();
  auto model = make_model();
  const mt::amp::Fp8Recipe recipe = mt::amp::Fp8Recipe().history_len(2);
  mt::amp::Fp8Scaling fp8(model, recipe);
  nn::DistributedDataParallel ddp(model, first);
  ddp.sync_fp8(fp8);
  mt::optim::SGD opt(model->parameters(), mt::optim::SGDOptions(0.01));
  fp8_step(ddp, fp8, recipe, opt, 0, r);
  auto second =
      dist::new_process_group(dist::ProcessGroupOptions().store(std::string(std::getenv("MIXTRAIN_STORE")) + "-next"));
  ddp.set_process_group(second);
  first->abort("replaced by the next generation (test)");
  float own_amax = 0;
  for (int step = 1; step < 3; ++step) own_amax = fp8_step(ddp, fp8, recipe, opt, step, r);
  SC_CHECK(!first->healthy() && second->healthy());
  const auto all = gather_scales(ddp, fp8);
  SC_CHECK(all.size() == 2 && all[0] == all[1]);
  SC_CHECK(r == 1 ? all[1].back() == own_amax : all[1].back() > own_amax);
  return 0;
}

TEST(DDPFp8, AmaxesAreReducedWithMaxSoEveryRankScalesAlike) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  auto res = run_ranks("fp8_amax_max_reduction", 2, std::chrono::seconds(50));
  for (const auto& r : res) ASSERT_EQ(r.exit_code, 0) << mt_dist_test::describe(res);
  res = run_ranks("fp8_amax_max_reduction", 2, std::chrono::seconds(50), {{-1, {"MT_NO_FP8_SYNC=1"}}});
  for (const auto& r : res) ASSERT_EQ(r.exit_code, 43) << mt_dist_test::describe(res);
}

TEST(DDPFp8, AmaxReductionFollowsSetProcessGroup) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  const auto res = run_ranks("fp8_sync_follows_the_new_group", 2, std::chrono::seconds(50));
  for (const auto& r : res) ASSERT_EQ(r.exit_code, 0) << mt_dist_test::describe(res);
}
