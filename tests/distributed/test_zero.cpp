// ZeRO-1 in real processes: reduce_scatter_tensor and all_gather_into_tensor against their
// definition (fp64 reference, NaN-poisoned outputs, in place and not), ZeroRedundancyOptimizer
// against DDP with a whole AdamW (bit for bit at two ranks, to summation order at three, uneven
// shares, clipping, fp16 parameters with sharded master weights), its shards' balance, and its
// checkpoints: saved by three ranks, resumed by two and by one process.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "mixtrain/mixtrain.h"
#include "mixtrain/distributed/zero.h"
#include "mixtrain/io/optimizer_state.h"
#include "compare.h"
#include "ranks.h"
#include "zero_fixture.h"

namespace mt = mixtrain;
namespace dist = mixtrain::distributed;
namespace nn = mixtrain::nn;
using mt_dist_test::bit_equal;
using mt_dist_test::max_rel_diff;
using mt_dist_test::run_ranks;
using mt_dist_test::Data;
using mt_dist_test::make_mlp;
using mt_dist_test::backward;

namespace {

double env_number(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtod(v, nullptr) : fallback;
}

std::vector<double> env_weights(int world) {
  std::vector<double> w;
  if (const char* s = std::getenv("MT_RANK_WEIGHTS"))
    for (const char* p = s; *p;) {
      char* end = nullptr;
      w.push_back(std::strtod(p, &end));
      p = *end ? end + 1 : end;
    }
  if (w.empty()) w.assign(static_cast<size_t>(world), 1.0);
  return w;
}

}  // namespace

// reduce_scatter_tensor and all_gather_into_tensor: every rank's result against the fp64 sum (or
// max, or mean) of every rank's chunk, computed from all_gather, in fp32 and fp16, into NaN.
MT_SCENARIO(zero_collectives) {
  auto g = dist::new_process_group();
  const int r = g->rank(), n = g->world_size();
  for (const mt::DType dtype : {mt::kFloat32, mt::kFloat16}) {
    for (const int64_t chunk : {int64_t{1}, int64_t{7}, int64_t{1000}}) {
      for (const dist::ReduceOp op : {dist::ReduceOp::Sum, dist::ReduceOp::Max, dist::ReduceOp::Avg}) {
        mt::Generator gen;
        gen.manual_seed(100 + static_cast<uint64_t>(r) + static_cast<uint64_t>(chunk));
        const mt::Tensor input = mt::randn({n * chunk}, gen).to(dtype);
        const std::vector<mt::Tensor> every = g->all_gather(input);
        std::vector<double> want(static_cast<size_t>(chunk), op == dist::ReduceOp::Max ? -INFINITY : 0.0);
        for (int q = 0; q < n; ++q) {
          const auto v = every[static_cast<size_t>(q)].to(mt::kFloat64).to_vector<double>();
          for (int64_t k = 0; k < chunk; ++k) {
            const double x = v[static_cast<size_t>(r * chunk + k)];
            double& w = want[static_cast<size_t>(k)];
            w = op == dist::ReduceOp::Max ? std::max(w, x) : w + x;
          }
        }
        if (op == dist::ReduceOp::Avg)
          for (double& w : want) w /= n;
        const double tol = dtype == mt::kFloat16 ? 4e-3 * n : 1e-6 * n;
        auto check = [&](const mt::Tensor& got) {
          const auto v = got.to(mt::kFloat64).to_vector<double>();
          for (int64_t k = 0; k < chunk; ++k)
            if (!(std::abs(v[static_cast<size_t>(k)] - want[static_cast<size_t>(k)]) <=
                  tol * std::max(1.0, std::abs(want[static_cast<size_t>(k)]))))
              return false;
          return true;
        };
        mt::Tensor out = mt::full({chunk}, NAN, mt::TensorOptions(dtype));
        g->reduce_scatter_tensor(out, input.clone(), op);
        SC_CHECK(check(out));
        mt::Tensor in_place = input.clone();
        mt::Tensor mine = in_place.narrow(0, r * chunk, chunk);
        g->reduce_scatter_tensor(mine, in_place, op);
        SC_CHECK(check(mine));
      }
      // all_gather_into_tensor: bit for bit what all_gather gives, in place and not.
      mt::Generator gen;
      gen.manual_seed(300 + static_cast<uint64_t>(r));
      const mt::Tensor mine = mt::randn({chunk}, gen).to(dtype);
      const mt::Tensor want = mt::cat(g->all_gather(mine), 0);
      mt::Tensor out = mt::full({n * chunk}, NAN, mt::TensorOptions(dtype));
      g->all_gather_into_tensor(out, mine);
      SC_CHECK(bit_equal({out}, {want}));
      mt::Tensor buf = mt::full({n * chunk}, NAN, mt::TensorOptions(dtype));
      buf.narrow(0, r * chunk, chunk).copy_(mine);
      mt::Tensor part = buf.narrow(0, r * chunk, chunk);
      g->all_gather_into_tensor(buf, part);
      SC_CHECK(bit_equal({buf}, {want}));
    }
  }
  // Sizes that are not world_size chunks are refused on the calling rank, before any collective.
  try {
    mt::Tensor out = mt::zeros({3});
    g->reduce_scatter_tensor(out, mt::zeros({3 * n + 1}));
    return 1;
  } catch (const mt::Error& e) {
    SC_CHECK(std::string(e.what()).find("must hold") != std::string::npos);
  }
  SC_CHECK(g->healthy());
  return 0;
}

TEST(Zero, ReduceScatterAndAllGatherIntoTensorMatchTheirDefinition) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  for (int world : {2, 3}) {
    const auto res = run_ranks("zero_collectives", world, std::chrono::seconds(50));
    for (const auto& r : res) ASSERT_EQ(r.exit_code, 0) << "world " << world << "\n" << mt_dist_test::describe(res);
  }
}

// Four AdamW steps: DDP with a whole AdamW against ZeroRedundancyOptimizer, from the same
// weights on the same data (uneven shares by MT_RANK_WEIGHTS; MT_CLIP: clipped to that norm;
// MT_FP16: fp16 parameters with fp32 master weights).
MT_SCENARIO(zero_matches_ddp) {
  auto g = dist::new_process_group();
  const int r = g->rank(), n = g->world_size();
  const std::vector<double> weights = env_weights(n);
  const double clip = env_number("MT_CLIP", 0);
  const bool fp16 = std::getenv("MT_FP16") != nullptr;
  const mt::DType dtype = fp16 ? mt::kFloat16 : mt::kFloat32;
  const Data d(12, 4);
  auto whole_model = make_mlp(7), zero_model = make_mlp(7);
  whole_model->to(dtype);
  zero_model->to(dtype);
  const auto options = nn::DistributedDataParallelOptions().first_bucket_mb(0.0005).bucket_cap_mb(0.001);
  nn::DistributedDataParallel whole_ddp(whole_model, g, options), zero_ddp(zero_model, g, options);
  SC_CHECK(zero_ddp.num_buckets() >= 2);
  const auto adamw = mt::optim::AdamWOptions(0.01).weight_decay(0.1).master_weights(fp16);
  mt::optim::AdamW whole(whole_model->parameters(), adamw);
  dist::ZeroRedundancyOptimizer zero(zero_ddp, [&](std::vector<mt::optim::ParamGroup> groups) {
    return std::make_unique<mt::optim::AdamW>(std::move(groups), adamw);
  });
  for (int64_t step = 0; step < 4; ++step) {
    whole.zero_grad();
    backward(whole_ddp, *whole_model, d, step, weights, dtype);
    if (clip > 0) mt::nn::utils::clip_grad_norm_(whole.master_params(), clip);
    whole.step();
    zero.zero_grad();
    backward(zero_ddp, *zero_model, d, step, weights, dtype);
    if (clip > 0) zero.clip_grad_norm_(clip);
    zero.step();
    for (const auto& p : zero_model->parameters()) SC_CHECK(!p.grad().defined());
  }
  const auto a = whole_model->parameters(), b = zero_model->parameters();
  // Two ranks add each gradient element once, as the all-reduce does: bit for bit. Three sum in
  // another order, and the clip's norm is summed per shard.
  if (n == 2 && clip == 0)
    SC_CHECK(bit_equal(a, b));
  else
    SC_CHECK(max_rel_diff(b, a) < (fp16 ? 2e-3 : 2e-6));
  // The shards: every element once, balanced (a bucket's chunks differ by its padding only), and
  // the optimizer state (and master weights) for the shard alone.
  int64_t total = 0;
  for (const auto& p : b) total += p.numel();
  const int64_t shard = zero.shard_numel();
  mt::Tensor sizes = mt::full({1}, static_cast<double>(shard), mt::TensorOptions(mt::kInt64));
  mt::Tensor sum = sizes.clone(), most = sizes.clone();
  g->all_reduce(sum);
  g->all_reduce(most, dist::ReduceOp::Max);
  SC_CHECK(sum.to_vector<int64_t>()[0] == total);
  SC_CHECK(most.to_vector<int64_t>()[0] <= (total + n - 1) / n + zero_ddp.num_buckets());
  int64_t state_bytes = 0;
  for (const auto& [name, t] : zero.optimizer().state_tensors()) state_bytes += t.nbytes();
  SC_CHECK(state_bytes == shard * 4 * (fp16 ? 3 : 2));  // exp_avg, exp_avg_sq (and the fp32 master)
  return 0;
}

TEST(Zero, TrainsAsDdpWithAWholeOptimizerDoes) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  struct Case {
    int world;
    const char* env;
  };
  for (const Case& c : {Case{2, ""}, Case{3, "MT_RANK_WEIGHTS=2,1,1"}, Case{3, "MT_CLIP=0.05"},
                        Case{2, "MT_FP16=1"}}) {
    std::map<int, std::vector<std::string>> env;
    if (*c.env) env[-1].push_back(c.env);
    const auto res = run_ranks("zero_matches_ddp", c.world, std::chrono::seconds(50), env);
    for (const auto& r : res)
      ASSERT_EQ(r.exit_code, 0) << "world " << c.world << " " << c.env << "\n" << mt_dist_test::describe(res);
  }
}

// GradScaler under ZeRO: an inf in one rank's shard of the gradients (rank 1's, put there after
// backward) makes every rank skip the step, its shard untouched, with the scale backed off on
// both; without sync_grad_scaler rank 0 would update its shard and all-gather it. The clean step
// after it is taken everywhere and leaves the ranks' parameters equal.
MT_SCENARIO(zero_scaler_skips_together) {
  auto g = dist::new_process_group();
  const int r = g->rank(), n = g->world_size();
  const Data d(12, 2);
  auto model = make_mlp(5);
  nn::DistributedDataParallel ddp(model, g, nn::DistributedDataParallelOptions().first_bucket_mb(0.002));
  dist::ZeroRedundancyOptimizer zero(ddp, [](std::vector<mt::optim::ParamGroup> groups) {
    return std::make_unique<mt::optim::AdamW>(std::move(groups), mt::optim::AdamWOptions(0.01));
  });
  mt::amp::GradScaler scaler(mt::amp::GradScalerOptions().init_scale(1024.0));
  ddp.sync_grad_scaler(scaler);
  const std::vector<double> even(static_cast<size_t>(n), 1.0);
  auto copies = [&] {
    std::vector<mt::Tensor> out;
    for (const auto& p : model->parameters()) out.push_back(p.clone());
    return out;
  };
  const std::vector<mt::Tensor> before = copies();
  for (int64_t step = 0; step < 2; ++step) {
    zero.zero_grad();
    auto [x, y] = d.rows(step, even, r);
    ddp.prepare_forward();
    ddp.set_local_batch(x.size(0), d.global);
    scaler.scale(ddp.scale_loss(mt::nn::functional::mse_loss(model->forward(x), y))).backward();
    if (step == 0 && r == 1) {
      mt::Tensor shard_grad = zero.optimizer().param_groups()[0].params()[0].grad();
      SC_CHECK(shard_grad.defined());
      shard_grad.narrow(0, 0, 1).fill_(INFINITY);
    }
    const bool taken = zero.step(scaler).taken();
    scaler.update();
    SC_CHECK(taken == (step == 1));
    if (step == 0) {
      SC_CHECK(bit_equal(model->parameters(), before));
      SC_CHECK(scaler.get_scale() < 1024.0);
    }
  }
  SC_CHECK(max_rel_diff(model->parameters(), before) > 0);
  const auto mine = model->parameters();
  for (size_t i = 0; i < mine.size(); ++i) {
    const std::vector<mt::Tensor> every = g->all_gather(mine[i].contiguous());
    for (const auto& other : every) SC_CHECK(bit_equal({other}, {mine[i]}));
  }
  return 0;
}

TEST(Zero, AnInfInOneRanksShardMakesEveryRankSkipTheStep) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  const auto res = run_ranks("zero_scaler_skips_together", 2, std::chrono::seconds(50));
  for (const auto& r : res) ASSERT_EQ(r.exit_code, 0) << mt_dist_test::describe(res);
}

// Checkpoints: MT_PHASE=save trains steps 0-2 at this world size and saves; MT_PHASE=resume loads
// (another world size) and trains steps 3-5; each compares with one process's six steps.
MT_SCENARIO(zero_checkpoint) {
  auto g = dist::new_process_group();
  const int n = g->world_size();
  const std::string dir = std::getenv("MT_CKPT_DIR");
  const bool save = std::string(std::getenv("MT_PHASE")) == "save";
  const Data d(12, 6);
  const auto adamw = mt::optim::AdamWOptions(0.01).weight_decay(0.1);
  auto model = make_mlp(21);
  nn::DistributedDataParallel ddp(model, g, nn::DistributedDataParallelOptions().first_bucket_mb(0.002));
  dist::ZeroRedundancyOptimizer zero(ddp, [&](std::vector<mt::optim::ParamGroup> groups) {
    return std::make_unique<mt::optim::AdamW>(std::move(groups), adamw);
  });
  mt::amp::GradScaler scaler(mt::amp::GradScalerOptions().enabled(false));
  const std::vector<double> even(static_cast<size_t>(n), 1.0);
  int64_t first = 0;
  if (!save) first = dist::load_checkpoint(dir, *model, zero, scaler, nullptr, {}) ;
  SC_CHECK(first == (save ? 0 : 3));
  for (int64_t step = first; step < first + 3; ++step) {
    zero.zero_grad();
    backward(ddp, *model, d, step, even, mt::kFloat32);
    zero.step();
  }
  if (save) dist::save_checkpoint(dir, *model, zero, scaler, 3, nlohmann::json::object(), {});
  // One process, straight through.
  auto reference = make_mlp(21);
  mt::optim::AdamW opt(reference->parameters(), adamw);
  for (int64_t step = 0; step < first + 3; ++step) {
    opt.zero_grad();
    auto [x, y] = d.rows(step, even, -1);
    mt::nn::functional::mse_loss(reference->forward(x), y).backward();
    opt.step();
  }
  SC_CHECK(max_rel_diff(model->parameters(), reference->parameters()) < 2e-6);
  return 0;
}

TEST(Zero, CheckpointsHoldTheWholeStateAndResumeAtAnotherWorldSize) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  const std::string dir = ::testing::TempDir() + "mt_zero_ckpt_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  auto res = run_ranks("zero_checkpoint", 3, std::chrono::seconds(50), {{-1, {"MT_CKPT_DIR=" + dir, "MT_PHASE=save"}}});
  for (const auto& r : res) ASSERT_EQ(r.exit_code, 0) << mt_dist_test::describe(res);
  res = run_ranks("zero_checkpoint", 2, std::chrono::seconds(50), {{-1, {"MT_CKPT_DIR=" + dir, "MT_PHASE=resume"}}});
  for (const auto& r : res) ASSERT_EQ(r.exit_code, 0) << mt_dist_test::describe(res);
  // The same checkpoint is one a whole optimizer loads, in one process: the state of all 3 ranks.
  auto model = make_mlp(99);
  mt::optim::AdamW opt(model->parameters(), mt::optim::AdamWOptions(0.01).weight_decay(0.1));
  mt::amp::GradScaler scaler(mt::amp::GradScalerOptions().enabled(false));
  EXPECT_EQ(mt::io::load_checkpoint(dir, *model, opt, scaler), 3);
  int64_t state = 0, params = 0;
  for (const auto& [name, t] : opt.state_tensors()) state += t.numel();
  for (const auto& p : model->parameters()) params += p.numel();
  EXPECT_EQ(state, 2 * params);  // exp_avg and exp_avg_sq of every parameter, whole
  std::filesystem::remove_all(dir);
}
