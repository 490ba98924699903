// DistributedDataParallel in real processes: one step equals the single-process step over the
// concatenated global batch (even and uneven splits, 2 and 3 ranks; bit-identical at world size
// 1), buckets as gradient views, no_sync, unused parameters, mismatched models, join.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "mixtrain/mixtrain.h"
#include "mixtrain/distributed/process_group.h"
#include "mixtrain/distributed/sampler.h"
#include "mixtrain/distributed/ddp.h"
#include "compare.h"
#include "ranks.h"

namespace mt = mixtrain;
namespace dist = mixtrain::distributed;
namespace nn = mixtrain::nn;
using mt_dist_test::bit_equal;
using mt_dist_test::max_rel_diff;
using mt_dist_test::run_ranks;

namespace {

mt::nn::Sequential make_mlp(uint64_t seed) {
  mt::manual_seed(seed);
  return mt::nn::Sequential(mt::nn::Linear(8, 32), mt::nn::ReLU(), mt::nn::Linear(32, 32), mt::nn::ReLU(),
                            mt::nn::Linear(32, 4));
}

std::vector<double> env_weights() {
  std::vector<double> w;
  if (const char* s = std::getenv("MT_RANK_WEIGHTS")) {
    for (const char* p = s; *p;) {
      char* end = nullptr;
      w.push_back(std::strtod(p, &end));
      p = *end ? end + 1 : end;
    }
  }
  return w;
}

}  // namespace

// Three steps of SGD with momentum: DDP on this rank's slice against one model on the whole batch.
MT_SCENARIO(ddp_matches_single) {
  dist::init_process_group();
  const int r = dist::rank(), n = dist::world_size();
  const int64_t global = 24;
  auto model = make_mlp(1000 + static_cast<uint64_t>(r));  // different inits: DDP must broadcast rank 0's
  auto reference = make_mlp(1000);
  nn::DistributedDataParallel ddp(model, nullptr, nn::DistributedDataParallelOptions().first_bucket_mb(0.001));
  SC_CHECK(ddp.num_buckets() >= 2);
  mt::optim::SGD opt(model->parameters(), mt::optim::SGDOptions(0.1).momentum(0.9));
  mt::optim::SGD ref_opt(reference->parameters(), mt::optim::SGDOptions(0.1).momentum(0.9));
  dist::DistributedSampler sampler(global * 3, global, r, n, env_weights(), /*shuffle=*/true, /*seed=*/5);
  mt::Generator gen;
  gen.manual_seed(77);
  const mt::Tensor X = mt::randn({global * 3, 8}, gen), Y = mt::randn({global * 3, 4}, gen);
  for (int64_t step = 0; step < 3; ++step) {
    // This rank's rows, and the whole global batch for the reference, in the sampler's order.
    auto rows = [&](const std::vector<int64_t>& idx, const mt::Tensor& src) {
      mt::Tensor out = mt::Tensor::empty({static_cast<int64_t>(idx.size()), src.size(1)});
      for (size_t k = 0; k < idx.size(); ++k) out.select(0, static_cast<int64_t>(k)).copy_(src.select(0, idx[k]));
      return out;
    };
    std::vector<int64_t> all;
    for (int q = 0; q < n; ++q) {
      dist::DistributedSampler other(global * 3, global, q, n, env_weights(), true, 5);
      const auto b = other.batch(step);
      all.insert(all.end(), b.begin(), b.end());
    }
    const auto mine = sampler.batch(step);
    // MT_AMP=fp16|bf16: both sides under autocast (fp32 parameters and gradients).
    const char* amp = std::getenv("MT_AMP");
    const mt::DType half = amp && std::string(amp) == "bf16" ? mt::kBFloat16 : mt::kFloat16;
    opt.zero_grad();
    {
      mt::Tensor loss;
      {
        mt::amp::AutocastGuard autocast(mt::DeviceType::CPU, half, amp != nullptr);
        if (std::getenv("MT_KNOWN_GLOBAL")) {
          // The trainers' form: every rank knows the global batch, so no exchange.
          ddp.prepare_forward();
          const mt::Tensor out = model->forward(rows(mine, X));
          ddp.set_local_batch(static_cast<int64_t>(mine.size()), global);
          loss = mt::nn::functional::mse_loss(out, rows(mine, Y));
        } else {
          loss = mt::nn::functional::mse_loss(ddp.forward(rows(mine, X)), rows(mine, Y));
        }
      }
      loss.backward();
    }
    opt.step();
    ref_opt.zero_grad();
    {
      mt::Tensor loss;
      {
        mt::amp::AutocastGuard autocast(mt::DeviceType::CPU, half, amp != nullptr);
        loss = mt::nn::functional::mse_loss(reference->forward(rows(all, X)), rows(all, Y));
      }
      loss.backward();
    }
    ref_opt.step();
    SC_CHECK(ddp.global_batch() == global);
  }
  // A share that is not part of its global batch is refused, and nothing is changed.
  for (const auto& [local, whole] : {std::pair<int64_t, int64_t>{global + 1, global}, {1, 0}, {-1, global}}) {
    bool refused = false;
    try {
      ddp.set_local_batch(local, whole);
    } catch (const mt::Error&) {
      refused = true;
    }
    SC_CHECK(refused && ddp.global_batch() == global);
  }
  const double diff = max_rel_diff(model->parameters(), reference->parameters());
  std::fprintf(stderr, "rank %d: max relative difference %.3g\n", r, diff);
  // fp32: summation order only. Under autocast each rank's fp16/bf16 activations are the same
  // rows as the reference's, so the gradients differ by summation order too, but the rounding of
  // the narrow type to the output can flip a last bit: the dtype's tolerance.
  const char* amp = std::getenv("MT_AMP");
  const double tol = !amp ? 1e-5 : std::string(amp) == "bf16" ? 1e-2 : 1e-3;
  if (n == 1) {
    SC_CHECK(bit_equal(model->parameters(), reference->parameters()));
  } else {
    SC_CHECK(diff < tol);
  }
  // Gradients are views into the buckets: within a bucket, parameters sit back to back.
  const auto params = model->parameters();
  for (const auto& bucket : ddp.bucket_assignment())
    for (size_t j = 1; j < bucket.size(); ++j) {
      const auto* prev = static_cast<const char*>(params[bucket[j - 1]].grad().raw_data());
      const auto* cur = static_cast<const char*>(params[bucket[j]].grad().raw_data());
      SC_CHECK(cur == prev + params[bucket[j - 1]].nbytes());
    }
  return 0;
}

TEST(DDP, StepEqualsSingleProcessStepOnTheGlobalBatch) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  struct Case {
    int world;
    const char* weights;
    const char* amp;
    bool known_global = false;  // set_local_batch(local, global): no batch exchange
  };
  for (const Case& c : {Case{1, "", ""}, Case{2, "", ""}, Case{3, "", ""}, Case{2, "3,1", ""}, Case{3, "1,2,3", ""},
                        Case{1, "", "fp16"}, Case{2, "3,1", "fp16"}, Case{3, "1,2,3", "bf16"},
                        Case{1, "", "", true}, Case{3, "1,2,3", "", true}}) {
    std::map<int, std::vector<std::string>> env;
    if (*c.weights) env[-1].push_back(std::string("MT_RANK_WEIGHTS=") + c.weights);
    if (*c.amp) env[-1].push_back(std::string("MT_AMP=") + c.amp);
    if (c.known_global) env[-1].push_back("MT_KNOWN_GLOBAL=1");
    const auto res = run_ranks("ddp_matches_single", c.world, std::chrono::seconds(50), env);
    for (const auto& r : res)
      ASSERT_EQ(r.exit_code, 0) << "world " << c.world << " weights " << c.weights << " amp " << c.amp
                                << (c.known_global ? " known global batch" : "") << "\n"
                                << mt_dist_test::describe(res);
  }
}

// no_sync: the first micro-batch accumulates locally, the second reduces both.
MT_SCENARIO(ddp_no_sync) {
  dist::init_process_group();
  const int r = dist::rank(), n = dist::world_size();
  auto model = make_mlp(3);
  auto reference = make_mlp(3);
  nn::DistributedDataParallel ddp(model);
  mt::Generator gen;
  gen.manual_seed(9);
  const int64_t micro = 4;
  const mt::Tensor X = mt::randn({2 * n * micro, 8}, gen), Y = mt::randn({2 * n * micro, 4}, gen);
  auto part = [&](int m, int q) { return std::pair{X.narrow(0, (m * n + q) * micro, micro).contiguous(),
                                                   Y.narrow(0, (m * n + q) * micro, micro).contiguous()}; };
  {
    auto guard = ddp.no_sync();
    auto [x, y] = part(0, r);
    (mt::nn::functional::mse_loss(ddp.forward(x), y) * 0.5).backward();
  }
  // Not reduced yet: rank 0's and rank 1's gradients differ.
  const auto local = model->parameters()[0].grad().clone();
  auto gathered = ddp.group().all_gather(local);
  SC_CHECK(max_rel_diff({gathered[0]}, {gathered[1]}) > 1e-4);
  auto [x, y] = part(1, r);
  (mt::nn::functional::mse_loss(ddp.forward(x), y) * 0.5).backward();
  for (int m = 0; m < 2; ++m) {
    mt::Tensor xs = X.narrow(0, m * n * micro, n * micro).contiguous();
    mt::Tensor ys = Y.narrow(0, m * n * micro, n * micro).contiguous();
    (mt::nn::functional::mse_loss(reference->forward(xs), ys) * 0.5).backward();
  }
  std::vector<mt::Tensor> g, gr;
  for (auto& p : model->parameters()) g.push_back(p.grad());
  for (auto& p : reference->parameters()) gr.push_back(p.grad());
  SC_CHECK(max_rel_diff(g, gr) < 2e-6);
  return 0;
}

TEST(DDP, NoSyncAccumulatesThenReduces) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  const auto res = run_ranks("ddp_no_sync", 2, std::chrono::seconds(50));
  for (const auto& r : res) ASSERT_EQ(r.exit_code, 0) << mt_dist_test::describe(res);
}

namespace {
// Two heads; forward uses only the first: the second head's parameters get no gradient.
struct TwoHeadImpl : mt::nn::Module {
  TwoHeadImpl() : Module("TwoHead") {
    mt::manual_seed(4);
    a = register_module("a", mt::nn::Linear(8, 4));
    b = register_module("b", mt::nn::Linear(8, 4));
  }
  mt::Tensor forward(const mt::Tensor& x) override { return a(x); }
  mt::nn::Linear a{nullptr}, b{nullptr};
};
MT_MODULE(TwoHead);
}  // namespace

MT_SCENARIO(ddp_unused) {
  dist::init_process_group();
  const bool find = std::getenv("MT_FIND_UNUSED") != nullptr;
  TwoHead model;
  nn::DistributedDataParallel ddp(model, nullptr, nn::DistributedDataParallelOptions().find_unused_parameters(find));
  const mt::Tensor x = mt::randn({4, 8}), y = mt::randn({4, 4});
  for (int step = 0; step < 2; ++step) {
    try {
      model->zero_grad();
      mt::nn::functional::mse_loss(ddp.forward(x), y).backward();
    } catch (const mt::Error& e) {
      std::fprintf(stderr, "caught: %s\n", e.what());
      SC_CHECK(!find && step == 1);
      SC_CHECK(std::strstr(e.what(), "b.weight") != nullptr && std::strstr(e.what(), "find_unused_parameters"));
      return 42;
    }
  }
  SC_CHECK(find);
  // The unused head was reduced as zeros.
  for (float v : model->b->weight.grad().to_vector<float>()) SC_CHECK(v == 0.0f);
  return 0;
}

TEST(DDP, UnusedParametersAreAnErrorUnlessFindUnused) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  auto res = run_ranks("ddp_unused", 2, std::chrono::seconds(40));
  for (const auto& r : res) ASSERT_EQ(r.exit_code, 42) << mt_dist_test::describe(res);
  res = run_ranks("ddp_unused", 2, std::chrono::seconds(40), {{-1, {"MT_FIND_UNUSED=1"}}});
  for (const auto& r : res) ASSERT_EQ(r.exit_code, 0) << mt_dist_test::describe(res);
}

MT_SCENARIO(ddp_mismatch) {
  dist::init_process_group();
  mt::nn::Sequential model = dist::rank() == 0 ? make_mlp(1)
                                               : mt::nn::Sequential(mt::nn::Linear(8, 32), mt::nn::ReLU(),
                                                                    mt::nn::Linear(32, 4));
  try {
    nn::DistributedDataParallel ddp(model);
  } catch (const mt::Error& e) {
    std::fprintf(stderr, "caught: %s\n", e.what());
    SC_CHECK(std::strstr(e.what(), "rank 1's model differs from rank 0's") != nullptr);
    return 42;
  }
  return 1;
}

TEST(DDP, MismatchedModelsAreDetectedAtConstruction) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  const auto res = run_ranks("ddp_mismatch", 2, std::chrono::seconds(40));
  for (const auto& r : res) ASSERT_EQ(r.exit_code, 42) << mt_dist_test::describe(res);
}

// Rank 1 has 2 batches, rank 0 has 4: rank 1 joins early and shadows rank 0's last two steps,
// which then equal single-process steps on rank 0's data alone.
MT_SCENARIO(ddp_join) {
  dist::init_process_group();
  const int r = dist::rank();
  auto model = make_mlp(6);
  auto reference = make_mlp(6);
  nn::DistributedDataParallel ddp(model);
  mt::optim::SGD opt(model->parameters(), mt::optim::SGDOptions(0.05));
  mt::optim::SGD ref_opt(reference->parameters(), mt::optim::SGDOptions(0.05));
  mt::Generator gen;
  gen.manual_seed(12);
  const mt::Tensor X = mt::randn({2, 4, 6, 8}, gen), Y = mt::randn({2, 4, 6, 4}, gen);  // [rank][step]
  const int steps = r == 0 ? 4 : 2;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    mt::nn::functional::mse_loss(ddp.forward(X.select(0, r).select(0, s)), Y.select(0, r).select(0, s)).backward();
    opt.step();
    ref_opt.zero_grad();
    mt::Tensor xs = s < 2 ? mt::cat({X.select(0, 0).select(0, s), X.select(0, 1).select(0, s)}, 0) : X.select(0, 0).select(0, s);
    mt::Tensor ys = s < 2 ? mt::cat({Y.select(0, 0).select(0, s), Y.select(0, 1).select(0, s)}, 0) : Y.select(0, 0).select(0, s);
    mt::nn::functional::mse_loss(reference->forward(xs), ys).backward();
    ref_opt.step();
  }
  const int64_t shadowed = ddp.join();
  SC_CHECK(shadowed == (r == 0 ? 0 : 2));
  // After join every replica holds rank 0's parameters (it ran the most steps).
  if (r == 0) SC_CHECK(max_rel_diff(model->parameters(), reference->parameters()) < 2e-6);
  const auto p = model->parameters()[0];
  const auto all = ddp.group().all_gather(p.detach().contiguous());
  SC_CHECK(bit_equal({all[0]}, {all[1]}));
  return 0;
}

TEST(DDP, RanksThatRunOutOfDataJoinWithoutHangingTheOthers) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  const auto res = run_ranks("ddp_join", 2, std::chrono::seconds(40));
  for (const auto& r : res) ASSERT_EQ(r.exit_code, 0) << mt_dist_test::describe(res);
}

TEST(DistributedSampler, SplitsEachGlobalBatchByWeightsAndCoversTheDataset) {
  EXPECT_EQ(dist::DistributedSampler::split(128, {3, 1}), (std::vector<int64_t>{96, 32}));
  EXPECT_EQ(dist::DistributedSampler::split(10, {1, 1, 1}), (std::vector<int64_t>{4, 3, 3}));
  EXPECT_EQ(dist::DistributedSampler::split(7, {1, 2, 3}), (std::vector<int64_t>{1, 2, 4}));
  // Every sample once per epoch, in the single-process order, ranks' slices back to back.
  const int64_t size = 103, global = 16;
  std::vector<int64_t> seen;
  for (int64_t step = 0; step < 7; ++step)
    for (int r = 0; r < 3; ++r) {
      dist::DistributedSampler s(size, global, r, 3, {3, 1, 2}, true, 11);
      s.set_epoch(2);
      const auto b = s.batch(step);
      seen.insert(seen.end(), b.begin(), b.end());
    }
  ASSERT_EQ(seen.size(), static_cast<size_t>(size));
  std::vector<int64_t> sorted = seen;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < size; ++i) EXPECT_EQ(sorted[static_cast<size_t>(i)], i);
  // Explicit per-rank sizes; a bad weight or rank is refused.
  auto s = dist::DistributedSampler::with_batch_sizes(100, {24, 8}, 1, false);
  EXPECT_EQ(s.batch(0), (std::vector<int64_t>{24, 25, 26, 27, 28, 29, 30, 31}));
  EXPECT_EQ(s.num_batches(), 4);
  EXPECT_THROW(dist::DistributedSampler(10, 4, 0, 2, {1, -1}), mt::Error);
  EXPECT_THROW(dist::DistributedSampler(10, 4, 2, 2), mt::Error);
}

// Batch norm's running statistics drift apart per rank (each normalises its own batch); with
// broadcast_buffers, rank 0's are copied to every rank at each forward.
MT_SCENARIO(ddp_buffers) {
  dist::init_process_group();
  const int r = dist::rank();
  const bool broadcast = std::getenv("MT_NO_BUFFER_BROADCAST") == nullptr;
  mt::manual_seed(8);
  mt::nn::Sequential model(mt::nn::BatchNorm2d(3));
  nn::DistributedDataParallel ddp(model, nullptr, nn::DistributedDataParallelOptions().broadcast_buffers(broadcast));
  mt::Generator gen;
  gen.manual_seed(static_cast<uint64_t>(50 + r));
  const mt::Tensor x = mt::randn({2, 3, 4, 4}, gen) * static_cast<double>(r + 1);
  auto running_mean = [&] { return model->named_buffers().front().second.detach().contiguous(); };
  mt::nn::functional::mse_loss(ddp.forward(x), mt::zeros({2, 3, 4, 4})).backward();
  auto all = ddp.group().all_gather(running_mean());
  SC_CHECK(!bit_equal({all[0]}, {all[1]}));  // updated by each rank's own batch
  ddp.prepare_forward(2);                    // the start of the next step
  all = ddp.group().all_gather(running_mean());
  SC_CHECK(bit_equal({all[0]}, {all[1]}) == broadcast);
  mt::nn::functional::mse_loss(model->forward(x), mt::zeros({2, 3, 4, 4})).backward();
  return 0;
}

TEST(DDP, BatchNormBuffersAreBroadcastFromRankZero) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  auto res = run_ranks("ddp_buffers", 2, std::chrono::seconds(40));
  for (const auto& r : res) ASSERT_EQ(r.exit_code, 0) << mt_dist_test::describe(res);
  res = run_ranks("ddp_buffers", 2, std::chrono::seconds(40), {{-1, {"MT_NO_BUFFER_BROADCAST=1"}}});
  for (const auto& r : res) ASSERT_EQ(r.exit_code, 0) << mt_dist_test::describe(res);
}

// As in PyTorch, a bucket closes once it reaches its cap, the gradient that crosses it included, so
// a large gradient ends the bucket it arrives in (its all-reduce starts while earlier layers still
// run backward) instead of opening a bucket that waits for them. One process, gradients unchanged.
TEST(DDP, BucketsCloseOnceTheyReachTheirCap) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  auto pg = dist::new_process_group(dist::ProcessGroupOptions().rank(0).world_size(1));
  const double kib = 1.0 / 1024;
  // In reverse registration order the gradients take 4 B (bias 2), 4000 B (weight 2), 4000 B
  // (bias 1) and 4000 B (weight 1).
  auto make = [] {
    mt::manual_seed(3);
    return mt::nn::Sequential(mt::nn::Linear(1, 1000), mt::nn::Linear(1000, 1));
  };
  const mt::Tensor x = mt::randn({5, 1}), y = mt::randn({5, 1});
  struct Case {
    double first_kib, cap_kib;
    int64_t buckets;
  };
  // {4, 4000} crosses 1 KiB, {4000, 4000} crosses 4.1 KiB (closing before the crossing gradient
  // would give 4 buckets); a cap above everything leaves one bucket after the first; a first cap
  // above everything, one bucket.
  for (const Case c : {Case{1, 4.1, 2}, Case{1, 100, 2}, Case{100, 100, 1}}) {
    SCOPED_TRACE(std::to_string(c.first_kib) + " / " + std::to_string(c.cap_kib) + " KiB");
    auto model = make(), plain = make();
    nn::DistributedDataParallel ddp(
        model, pg, nn::DistributedDataParallelOptions().first_bucket_mb(c.first_kib * kib).bucket_cap_mb(c.cap_kib * kib));
    EXPECT_EQ(ddp.num_buckets(), c.buckets);
    mt::nn::functional::mse_loss(ddp.forward(x), y).backward();
    mt::nn::functional::mse_loss(plain->forward(x), y).backward();
    std::vector<mt::Tensor> got, want;
    for (const auto& p : model->parameters()) got.push_back(p.grad());
    for (const auto& p : plain->parameters()) want.push_back(p.grad());
    EXPECT_TRUE(bit_equal(got, want));  // world size 1: each gradient moved into its view, unchanged
  }
}
