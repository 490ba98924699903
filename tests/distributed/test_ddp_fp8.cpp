// FP8 under data parallelism in real processes: with DDP::sync_fp8 the step's amaxes are reduced
// with MAX across ranks, so ranks whose data differ in magnitude still compute the same scales
// (and those of the larger amaxes); without it they diverge.
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

MT_SCENARIO(fp8_amax_max_reduction) {
  dist::init_process_group();
  const int r = dist::rank();
  const bool sync = std::getenv("MT_NO_FP8_SYNC") == nullptr;
  mt::manual_seed(3);
  auto model = mt::nn::Sequential(mt::nn::Linear(16, 32), mt::nn::GELU(), mt::nn::Linear(32, 16));
  const mt::amp::Fp8Recipe recipe = mt::amp::Fp8Recipe().history_len(2);
  mt::amp::Fp8Scaling fp8(model, recipe);
  nn::DistributedDataParallel ddp(model);
  if (sync) ddp.sync_fp8(fp8);
  mt::optim::SGD opt(model->parameters(), mt::optim::SGDOptions(0.01));
  float own_amax = 0;
  for (int step = 0; step < 3; ++step) {
    mt::Generator g;
    g.manual_seed(static_cast<uint64_t>(100 * step + r));
    // Rank 1's inputs are ten times rank 0's: their amaxes differ.
    const mt::Tensor x = mt::randn({8, 16}, g) * (r == 1 ? 10.0 : 1.0), y = mt::randn({8, 16}, g);
    opt.zero_grad();
    mt::Tensor loss;
    {
      mt::amp::Fp8AutocastGuard scope(mt::DeviceType::CPU, recipe);
      loss = mt::nn::functional::mse_loss(ddp.forward(x), y);
    }
    loss.backward();
    opt.step();
    own_amax = mt::max(mt::abs(x)).item<float>();
    fp8.update();
  }
  // Every rank's scales and the input amax both ranks used last.
  std::vector<double> mine;
  for (const auto& [n, t] : model->state_dict())
    if (n.find("fp8_scale") != std::string::npos)
      for (float v : t.to_vector<float>()) mine.push_back(v);
  mine.push_back(fp8.stats()[0].amax[0]);
  const auto all = ddp.group().all_gather(mt::from_vector<double>(mine, {static_cast<int64_t>(mine.size())},
                                                                   mt::TensorOptions(mt::kFloat64)));
  const auto a = all[0].to_vector<double>(), b = all[1].to_vector<double>();
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

TEST(DDPFp8, AmaxesAreReducedWithMaxSoEveryRankScalesAlike) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  auto res = run_ranks("fp8_amax_max_reduction", 2, std::chrono::seconds(50));
  for (const auto& r : res) ASSERT_EQ(r.exit_code, 0) << mt_dist_test::describe(res);
  res = run_ranks("fp8_amax_max_reduction", 2, std::chrono::seconds(50), {{-1, {"MT_NO_FP8_SYNC=1"}}});
  for (const auto& r : res) ASSERT_EQ(r.exit_code, 43) << mt_dist_test::describe(res);
}
