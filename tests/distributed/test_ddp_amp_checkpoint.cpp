// DDP with AMP and checkpoints in real processes: an overflow injected on one rank only makes
// every rank skip together with identical scale and growth tracker; rank 0 saves after a barrier,
// every rank loads, and the resumed run is bit-exact.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <limits>

#include "mixtrain/mixtrain.h"
#include "mixtrain/distributed/process_group.h"
#include "mixtrain/distributed/ddp.h"
#include "ranks.h"

namespace mt = mixtrain;
namespace dist = mixtrain::distributed;
namespace nn = mixtrain::nn;
using mt_dist_test::run_ranks;

namespace {

mt::nn::Sequential make_mlp(uint64_t seed) {
  mt::manual_seed(seed);
  return mt::nn::Sequential(mt::nn::Linear(8, 16), mt::nn::ReLU(), mt::nn::Linear(16, 4));
}

std::pair<mt::Tensor, mt::Tensor> batch(int step, int rank) {
  mt::Generator g;
  g.manual_seed(static_cast<uint64_t>(1000 * step + rank));
  return {mt::randn({6, 8}, g), mt::randn({6, 4}, g)};
}

}  // namespace

MT_SCENARIO(amp_overflow_one_rank) {
  dist::init_process_group();
  const int r = dist::rank();
  const bool sync = std::getenv("MT_NO_SCALER_SYNC") == nullptr;
  auto model = make_mlp(2);
  nn::DistributedDataParallel ddp(model);
  mt::optim::SGD opt(model->parameters(), mt::optim::SGDOptions(0.01));
  mt::amp::GradScaler scaler(mt::amp::GradScalerOptions().init_scale(1024).growth_interval(2));
  if (sync) ddp.sync_grad_scaler(scaler);
  for (int step = 0; step < 4; ++step) {
    opt.zero_grad();
    auto [x, y] = batch(step, r);
    mt::Tensor loss;
    {
      mt::amp::AutocastGuard autocast(mt::DeviceType::CPU, mt::kFloat16);
      loss = mt::nn::functional::mse_loss(ddp.forward(x), y);
    }
    scaler.scale(loss).backward();
    // After the all-reduce: only rank 1 sees an inf (as a sharded or accumulated gradient could).
    if (step == 1 && r == 1) model->parameters()[0].grad().fill_(std::numeric_limits<float>::infinity());
    scaler.step(opt);
    scaler.update();
  }
  const mt::Tensor state = mt::from_vector<double>(
      {scaler.get_scale(), static_cast<double>(scaler.get_growth_tracker()),
       static_cast<double>(scaler.skipped_steps()), model->parameters()[0].sum().item<float>()},
      {4}, mt::TensorOptions(mt::kFloat64));
  const auto all = ddp.group().all_gather(state);
  const auto a = all[0].to_vector<double>(), b = all[1].to_vector<double>();
  std::fprintf(stderr, "rank 0: scale %g tracker %g skipped %g | rank 1: scale %g tracker %g skipped %g\n", a[0],
               a[1], a[2], b[0], b[1], b[2]);
  if (!sync) return a == b ? 1 : 43;  // the control: without agreement the ranks diverge
  SC_CHECK(a == b);
  SC_CHECK(a[2] == 1);     // both skipped the poisoned step
  SC_CHECK(a[0] == 1024);  // 1024 -> 512 at the overflow, -> 1024 after two clean steps
  SC_CHECK(a[1] == 0);
  return 0;
}

TEST(DDPAmp, OverflowOnOneRankSkipsOnEveryRankWithIdenticalScale) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  auto res = run_ranks("amp_overflow_one_rank", 2, std::chrono::seconds(50));
  for (const auto& r : res) ASSERT_EQ(r.exit_code, 0) << mt_dist_test::describe(res);
  res = run_ranks("amp_overflow_one_rank", 2, std::chrono::seconds(50), {{-1, {"MT_NO_SCALER_SYNC=1"}}});
  for (const auto& r : res) ASSERT_EQ(r.exit_code, 43) << mt_dist_test::describe(res);
}

// fp16 and bf16 bucket compression: close to the uncompressed reduction.
MT_SCENARIO(ddp_compression) {
  dist::init_process_group();
  const int r = dist::rank();
  auto exact = make_mlp(5);
  auto packed = make_mlp(5);
  const mt::DType c = std::getenv("MT_BF16") ? mt::kBFloat16 : mt::kFloat16;
  nn::DistributedDataParallel d1(exact);
  nn::DistributedDataParallel d2(packed, nullptr, nn::DistributedDataParallelOptions().compression(c));
  auto [x, y] = batch(0, r);
  mt::nn::functional::mse_loss(d1.forward(x), y).backward();
  mt::nn::functional::mse_loss(d2.forward(x), y).backward();
  const double tol = c == mt::kBFloat16 ? 1e-2 : 1e-3;
  for (size_t i = 0; i < exact->parameters().size(); ++i) {
    const auto g1 = exact->parameters()[i].grad().to_vector<float>();
    const auto g2 = packed->parameters()[i].grad().to_vector<float>();
    for (size_t k = 0; k < g1.size(); ++k) SC_CHECK(std::abs(g1[k] - g2[k]) <= tol * std::max(1.0f, std::abs(g1[k])));
  }
  return 0;
}

TEST(DDP, HalfCompressedBucketsAreCloseToExact) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  for (const char* bf : {"MT_FP16=1", "MT_BF16=1"}) {
    const auto res = run_ranks("ddp_compression", 2, std::chrono::seconds(40), {{-1, {bf}}});
    for (const auto& r : res) ASSERT_EQ(r.exit_code, 0) << bf << "\n" << mt_dist_test::describe(res);
  }
}

MT_SCENARIO(ddp_checkpoint_resume) {
  dist::init_process_group();
  const int r = dist::rank();
  const std::string dir = std::string(std::getenv("MT_DIST_TMP")) + "/ckpt";
  auto run_steps = [&](nn::DistributedDataParallel& ddp, mt::nn::Module& m, mt::optim::Adam& opt,
                       mt::amp::GradScaler& scaler, int from, int to) {
    for (int step = from; step < to; ++step) {
      opt.zero_grad();
      auto [x, y] = batch(step, r);
      scaler.scale(mt::nn::functional::mse_loss(ddp.forward(x), y)).backward();
      scaler.step(opt);
      scaler.update();
    }
    (void)m;
  };
  auto model = make_mlp(3);
  nn::DistributedDataParallel ddp(model);
  mt::optim::Adam opt(model->parameters(), mt::optim::AdamOptions(1e-2));
  mt::amp::GradScaler scaler;
  run_steps(ddp, *model, opt, scaler, 0, 2);
  ddp.group().barrier();  // every rank finished step 2
  if (r == 0) mt::io::save_checkpoint(dir, *model, opt, scaler, 2);
  ddp.group().barrier();  // the checkpoint is complete before anyone reads it
  run_steps(ddp, *model, opt, scaler, 2, 4);

  auto resumed = make_mlp(99);
  nn::DistributedDataParallel ddp2(resumed);
  mt::optim::Adam opt2(resumed->parameters(), mt::optim::AdamOptions(1e-2));
  mt::amp::GradScaler scaler2;
  SC_CHECK(mt::io::load_checkpoint(dir, *resumed, opt2, scaler2) == 2);
  run_steps(ddp2, *resumed, opt2, scaler2, 2, 4);
  for (size_t i = 0; i < model->parameters().size(); ++i) {
    const auto a = model->parameters()[i].to_vector<float>(), b = resumed->parameters()[i].to_vector<float>();
    SC_CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  }
  return 0;
}

TEST(DDPCheckpoint, RankZeroSavesEveryRankLoadsResumeIsBitExact) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  const auto res = run_ranks("ddp_checkpoint_resume", 2, std::chrono::seconds(50));
  for (const auto& r : res) ASSERT_EQ(r.exit_code, 0) << mt_dist_test::describe(res);
}

// fp16 with an uneven split (2,1,1 over 8 rows): each rank back-propagates its rows' part of the
// global mean (ddp.scale_loss), so the activation gradients have the single process's magnitude
// and the steps that overflow are the single process's. The scale starts where the single process
// overflows and halves into range; with growth every step it keeps crossing back. The control
// (MT_WEIGHT_AFTER_BACKWARD: each rank's own mean back-propagated, weighted afterwards) gives the
// ranks with a quarter of the rows four times the gradients, and they skip steps the single
// process takes.
MT_SCENARIO(amp_uneven_overflow) {
  dist::init_process_group();
  const int r = dist::rank();
  const bool scale_loss = std::getenv("MT_WEIGHT_AFTER_BACKWARD") == nullptr;
  auto make = [] {
    nn::Linear lin(nn::LinearOptions(2, 1).bias(false));
    mt::NoGradGuard no_grad;
    lin->weight.fill_(0.5);
    return lin;
  };
  auto model = make(), reference = make();
  nn::DistributedDataParallel ddp(model);
  mt::optim::SGD opt(model->parameters(), mt::optim::SGDOptions(1e-3));
  mt::optim::SGD ref_opt(reference->parameters(), mt::optim::SGDOptions(1e-3));
  auto options = mt::amp::GradScalerOptions().init_scale(524288).growth_interval(1);
  mt::amp::GradScaler scaler(options), ref_scaler(options);
  ddp.sync_grad_scaler(scaler);
  const int64_t rows[] = {4, 2, 2};
  const mt::Tensor x = mt::full({8, 2}, 0.01), y = mt::full({8, 1}, -1.0);
  std::string mine, single;
  for (int step = 0; step < 6; ++step) {
    opt.zero_grad();
    ref_opt.zero_grad();
    mt::Tensor loss, ref_loss;
    {
      mt::amp::AutocastGuard autocast(mt::DeviceType::CPU, mt::kFloat16);
      ddp.prepare_forward();
      ddp.set_local_batch(rows[r], 8);
      const int64_t begin = r == 0 ? 0 : (r == 1 ? 4 : 6);
      loss = mt::nn::functional::mse_loss(model->forward(x.narrow(0, begin, rows[r])), y.narrow(0, begin, rows[r]));
      ref_loss = mt::nn::functional::mse_loss(reference->forward(x), y);
    }
    scaler.scale(scale_loss ? ddp.scale_loss(loss) : loss).backward();
    ref_scaler.scale(ref_loss).backward();
    mine += scaler.step(opt) ? "." : "S";
    single += ref_scaler.step(ref_opt) ? "." : "S";
    scaler.update();
    ref_scaler.update();
  }
  std::fprintf(stderr, "rank %d steps %s, single process %s\n", r, mine.c_str(), single.c_str());
  SC_CHECK(single.find('S') != std::string::npos && single.find('.') != std::string::npos);
  if (!scale_loss) return mine == single ? 1 : 43;
  SC_CHECK(mine == single);
  SC_CHECK(scaler.get_scale() == ref_scaler.get_scale());
  return 0;
}

TEST(DDPAmp, UnevenSplitSkipsTheStepsOneProcessSkipsInFp16) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  auto res = run_ranks("amp_uneven_overflow", 3, std::chrono::seconds(50));
  for (const auto& r : res) ASSERT_EQ(r.exit_code, 0) << mt_dist_test::describe(res);
  res = run_ranks("amp_uneven_overflow", 3, std::chrono::seconds(50), {{-1, {"MT_WEIGHT_AFTER_BACKWARD=1"}}});
  // Rank 0 (half the rows) sees its own gradients doubled only; the overflow of ranks 1 and 2
  // reaches every rank through the sum.
  for (const auto& r : res) ASSERT_EQ(r.exit_code, 43) << mt_dist_test::describe(res);
}
