// The launcher's per-rank shares in the library: read from the environment, held by the process
// group, followed by DistributedSampler at every batch, moved by DDP when adaptive, and sized by
// a dry run of the trainer's own step under MIXTRAIN_RANK_BATCHES=auto; in real processes.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "mixtrain/mixtrain.h"
#include "ranks.h"
#include "support/testing.h"

namespace mt = mixtrain;
namespace dist = mixtrain::distributed;
using mt_dist_test::run_ranks;

namespace {

// Sets (or unsets, for nullptr) the variables for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* weights, const char* batches) {
    set(dist::kRankWeightsEnv, weights);
    set(dist::kRankBatchesEnv, batches);
  }
  ~ScopedEnv() {
    ::unsetenv(dist::kRankWeightsEnv);
    ::unsetenv(dist::kRankBatchesEnv);
  }

 private:
  static void set(const char* name, const char* value) {
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
};

mt::nn::Sequential make_mlp(mt::Device device = mt::Device::cpu()) {
  mt::manual_seed(5);
  auto m = mt::nn::Sequential(mt::nn::Linear(16, 64), mt::nn::ReLU(), mt::nn::Linear(64, 1));
  m->to(device);
  return m;
}

}  // namespace

TEST(RankShares, LaunchVariablesAreReadAndCheckedWhole) {
  {
    const ScopedEnv env(nullptr, nullptr);
    const dist::RankShares s = dist::launch_rank_shares(3);
    EXPECT_TRUE(s.weights.empty());
    EXPECT_FALSE(s.adaptive || s.by_memory);
    EXPECT_EQ(s.weights_for(3), (std::vector<double>{1, 1, 1}));
  }
  {
    const ScopedEnv env("2,1,1", nullptr);
    EXPECT_EQ(dist::launch_rank_shares(3).weights, (std::vector<double>{2, 1, 1}));
    EXPECT_TRUE(mt::testing::error_contains(mt::testing::error_of([] { dist::launch_rank_shares(2); }),
                                            {"rank weights \"2,1,1\"", "3 values for 2 ranks"}));
  }
  {
    const ScopedEnv env("adaptive", nullptr);
    const dist::RankShares s = dist::launch_rank_shares(2);
    EXPECT_TRUE(s.adaptive);
    EXPECT_TRUE(s.weights.empty());
  }
  {
    const ScopedEnv env(nullptr, "auto");
    EXPECT_TRUE(dist::launch_rank_shares(2).by_memory);
  }
  {
    const ScopedEnv env(nullptr, "bogus");
    EXPECT_TRUE(mt::testing::error_contains(mt::testing::error_of([] { dist::launch_rank_shares(1); }),
                                            {"MIXTRAIN_RANK_BATCHES", "'bogus'"}));
  }
  {
    const ScopedEnv env("1,1", "auto");
    EXPECT_TRUE(mt::testing::error_contains(mt::testing::error_of([] { dist::launch_rank_shares(2); }),
                                            {"--rank-batches auto and --rank-weights"}));
  }
}

// --rank-weights / MIXTRAIN_RANK_WEIGHTS: one positive, finite number per rank, or an Error that
// quotes the text.
TEST(RankShares, WeightsAreOnePositiveNumberPerRank) {
  EXPECT_EQ(dist::parse_rank_weights("3,1", 2), std::vector<double>({3.0, 1.0}));
  EXPECT_EQ(dist::parse_rank_weights("0.5,0.25,0.25", 3), std::vector<double>({0.5, 0.25, 0.25}));
  for (const auto& [text, world] : std::vector<std::pair<std::string, int>>{{"3,x", 2},   {"3,-1", 2}, {"3,0", 2},
                                                                           {"3,inf", 2}, {"3,nan", 2}, {"3", 2},
                                                                           {"3,1,1", 2}, {"", 1},     {"3,,1", 3},
                                                                           {"1e308,1e308", 2}}) {
    const std::string what = mt::testing::error_of([&, text = text, world = world] { dist::parse_rank_weights(text, world); });
    EXPECT_TRUE(mt::testing::error_contains(what, {"\"" + text + "\""})) << text << " for " << world << " ranks";
  }
}

TEST(RankShares, FitsBecomeWeightsOrAnErrorNamingEveryRanksFit) {
  const std::vector<double> w = dist::rank_weights_from_fits({{int64_t{1} << 30, 40}, {int64_t{1} << 29, 20}}, 60);
  EXPECT_EQ(w, (std::vector<double>{40, 20}));
  EXPECT_TRUE(mt::testing::error_contains(
      mt::testing::error_of([] { dist::rank_weights_from_fits({{int64_t{1} << 30, 40}, {int64_t{1} << 29, 20}}, 61); }),
      {"61", "rank 0 fits 40 in 1.00 GiB", "rank 1 fits 20 in 512.00 MiB", "60 together"}));
  EXPECT_TRUE(mt::testing::error_contains(
      mt::testing::error_of([] { dist::rank_weights_from_fits({{1024, 0}, {int64_t{1} << 30, 100}}, 10); }),
      {"rank 0 fits 0 in 1.00 KiB", "cannot hold even 2 samples"}));
}

// A rank's budget: MIXTRAIN_RANK_MEMORY when set (strictly parsed), else the CPU's available
// memory shared among the host's ranks.
TEST(RankShares, MemoryBudgetComesFromTheVariableOrTheDevice) {
  ::unsetenv(dist::kRankMemoryEnv);
  const int64_t whole = dist::rank_memory_budget(mt::Device::cpu(), 1);
  const int64_t half = dist::rank_memory_budget(mt::Device::cpu(), 2);
  EXPECT_GT(half, 0);
  EXPECT_LT(half, whole);
  EXPECT_THROW(mt::memory::available_bytes(mt::Device::meta()), mt::Error);
  ::setenv(dist::kRankMemoryEnv, "48MiB", 1);
  EXPECT_EQ(dist::rank_memory_budget(mt::Device::cpu(), 2), int64_t{48} << 20);
  ::setenv(dist::kRankMemoryEnv, "48 MiB", 1);
  EXPECT_TRUE(mt::testing::error_contains(
      mt::testing::error_of([] { dist::rank_memory_budget(mt::Device::cpu(), 2); }), {dist::kRankMemoryEnv, "'48 MiB'"}));
  ::unsetenv(dist::kRankMemoryEnv);
}

// The group takes the launcher's weights; the sampler made from the group splits every batch by
// them, and by new ones as soon as the group has them. The explicit constructor keeps its own.
MT_SCENARIO(sampler_follows_group) {
  dist::init_process_group();
  const int r = dist::rank();
  dist::ProcessGroup& group = dist::default_group();
  SC_CHECK((group.rank_shares().weights == std::vector<double>{2, 1, 1}));
  dist::DistributedSampler sampler(1000, 96, dist::DistributedSamplerOptions().seed(3));
  SC_CHECK((sampler.batch_sizes(0) == std::vector<int64_t>{48, 24, 24}));
  SC_CHECK(static_cast<int64_t>(sampler.batch(0).size()) == sampler.batch_sizes(0)[static_cast<size_t>(r)]);
  // Together the ranks draw what one process draws: the global batch's indices, each once.
  const std::vector<int64_t> mine = sampler.batch(1);
  const std::vector<mt::Tensor> all = group.all_gather(mt::from_vector(std::vector<int64_t>{
      static_cast<int64_t>(mine.size()), mine.front(), mine.back()}, {3}));
  const dist::DistributedSampler one(1000, 96, 0, 1, {}, true, 3);
  const std::vector<int64_t> whole = one.batch(1);
  int64_t at = 0;
  for (const mt::Tensor& t : all) {
    const std::vector<int64_t> v = t.to_vector<int64_t>();
    SC_CHECK(v[1] == whole[static_cast<size_t>(at)] && v[2] == whole[static_cast<size_t>(at + v[0] - 1)]);
    at += v[0];
  }
  SC_CHECK(at == 96);
  dist::RankShares s = group.rank_shares();
  s.weights = {1, 1, 2};
  group.set_rank_shares(s);
  SC_CHECK((sampler.batch_sizes(2) == std::vector<int64_t>{24, 24, 48}));
  SC_CHECK((sampler.rank_weights() == std::vector<double>{1, 1, 2}));
  const dist::DistributedSampler own(1000, 96, r, 3);
  SC_CHECK((own.batch_sizes(0) == std::vector<int64_t>{32, 32, 32}));
  return 0;
}

TEST(RankShares, SamplerFollowsTheGroupsShares) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  const auto res = run_ranks("sampler_follows_group", 3, std::chrono::seconds(60),
                             {{-1, {std::string(dist::kRankWeightsEnv) + "=2,1,1"}}});
  for (const auto& rr : res) EXPECT_EQ(rr.exit_code, 0) << mt_dist_test::describe(res);
}

// --rank-weights adaptive with no code of the trainer's own: rank 1 takes 20 ms longer over each
// step's compute, DDP times both ranks and moves rows to rank 0, the sampler splits by the moved
// shares, and both ranks hold the same shares throughout.
MT_SCENARIO(ddp_moves_adaptive_shares) {
  dist::init_process_group();
  const int r = dist::rank();
  dist::ProcessGroup& group = dist::default_group();
  SC_CHECK(group.rank_shares().adaptive);
  auto model = make_mlp();
  mt::nn::DistributedDataParallel ddp(model);
  mt::optim::SGD opt(model->parameters(), mt::optim::SGDOptions(0.01));
  dist::DistributedSampler sampler(1 << 20, 256);
  const mt::Tensor data = mt::randn({256, 16}), target = mt::randn({256, 1});
  for (int64_t step = 0; step < 24; ++step) {
    const std::vector<int64_t> sizes = sampler.batch_sizes(step);
    const int64_t rows = sizes[static_cast<size_t>(r)];
    opt.zero_grad();
    const mt::Tensor loss = mt::nn::functional::mse_loss(ddp.forward(data.narrow(0, 0, rows)), target.narrow(0, 0, rows));
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ddp.scale_loss(loss).backward();
    SC_CHECK(ddp.step_compute_seconds() > 0);
    opt.step();
    // Every rank holds the same shares after every step.
    const std::vector<double> w = group.rank_shares().weights_for(2);
    const std::vector<mt::Tensor> all = group.all_gather(mt::from_vector(w, {2}, mt::TensorOptions(mt::kFloat64)));
    SC_CHECK(all[0].to_vector<double>() == all[1].to_vector<double>());
  }
  const std::vector<int64_t> last = sampler.batch_sizes(24);
  std::fprintf(stderr, "rank %d: %lld shares changes, last split %lld/%lld\n", r,
               static_cast<long long>(group.rank_shares().changes), static_cast<long long>(last[0]),
               static_cast<long long>(last[1]));
  SC_CHECK(group.rank_shares().changes >= 1);
  SC_CHECK(last[0] > last[1]);
  return 0;
}

TEST(RankShares, DdpMovesAdaptiveSharesAndTheSamplerFollows) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  const auto res = run_ranks("ddp_moves_adaptive_shares", 2, std::chrono::seconds(90),
                             {{-1, {std::string(dist::kRankWeightsEnv) + "=adaptive", "OMP_NUM_THREADS=1"}}});
  for (const auto& rr : res) EXPECT_EQ(rr.exit_code, 0) << mt_dist_test::describe(res);
}

// --rank-batches auto for a trainer of its own: the sampler dry-runs the step it is given at
// each rank's budget; rank 1's budget holds about a third of the batch, and each rank's share is
// at most its own largest fitting share (found here by the same search, independently per rank).
MT_SCENARIO(sampler_sizes_shares_by_dry_run) {
  dist::init_process_group();
  const int r = dist::rank();
  const auto build = [](int64_t rows) -> std::function<void()> {
    auto model = std::make_shared<mt::nn::Sequential>(make_mlp(mt::Device::meta()));
    auto opt = std::make_shared<mt::optim::AdamW>((*model)->parameters(), mt::optim::AdamWOptions(1e-3));
    const mt::TensorOptions meta = mt::TensorOptions().device(mt::Device::meta());
    return [=] {
      opt->zero_grad();
      mt::nn::functional::mse_loss((*model)->forward(mt::empty({rows, 16}, meta)), mt::empty({rows, 1}, meta)).backward();
      opt->step();
    };
  };
  const auto peak = [&](int64_t rows) { return mt::memory::dry_run_step(mt::Device::cpu(), build(rows)).peak_bytes(); };
  const int64_t global = 4096;
  const char* budget = std::getenv(dist::kRankMemoryEnv);
  SC_CHECK(budget != nullptr);
  const mt::memory::BatchFit own = mt::memory::fit_batch(peak, mt::memory::parse_bytes(budget, "budget"), 2, global);
  SC_CHECK(own.fits);
  dist::DistributedSampler sampler(1 << 20, global, dist::DistributedSamplerOptions().dry_run_step(build));
  const std::vector<int64_t> sizes = sampler.batch_sizes(0);
  std::fprintf(stderr, "rank %d fits %lld; shares %lld/%lld\n", r, static_cast<long long>(own.batch),
               static_cast<long long>(sizes[0]), static_cast<long long>(sizes[1]));
  SC_CHECK(sizes[0] + sizes[1] == global);
  SC_CHECK(sizes[static_cast<size_t>(r)] <= own.batch);
  SC_CHECK(sizes[1] < sizes[0]);
  SC_CHECK(!dist::default_group().rank_shares().by_memory);
  return 0;
}

MT_SCENARIO(sampler_without_step_refuses_auto) {
  dist::init_process_group();
  try {
    dist::DistributedSampler sampler(100, 10);
  } catch (const mt::Error& e) {
    SC_CHECK(std::string(e.what()).find("dry_run_step") != std::string::npos);
    return 0;
  }
  return 1;
}

TEST(RankShares, SamplerSizesSharesByADryRunOfTheTrainersStep) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  // Budgets around the step's peak at 3000 and at 1400 rows of the global 4096: neither rank
  // alone holds the batch, together they do.
  const auto peak = [](int64_t rows) {
    auto model = make_mlp(mt::Device::meta());
    mt::optim::AdamW opt(model->parameters(), mt::optim::AdamWOptions(1e-3));
    const mt::TensorOptions meta = mt::TensorOptions().device(mt::Device::meta());
    return mt::memory::dry_run_step(mt::Device::cpu(), [&] {
             opt.zero_grad();
             mt::nn::functional::mse_loss(model->forward(mt::empty({rows, 16}, meta)), mt::empty({rows, 1}, meta))
                 .backward();
             opt.step();
           })
        .peak_bytes();
  };
  const std::string b0 = std::to_string(peak(3000)), b1 = std::to_string(peak(1400));
  const std::string auto_env = std::string(dist::kRankBatchesEnv) + "=auto";
  const std::string mem = std::string(dist::kRankMemoryEnv) + "=";
  const auto res = run_ranks("sampler_sizes_shares_by_dry_run", 2, std::chrono::seconds(90),
                             {{-1, {auto_env}}, {0, {mem + b0}}, {1, {mem + b1}}});
  for (const auto& rr : res) EXPECT_EQ(rr.exit_code, 0) << mt_dist_test::describe(res);
  const auto refused = run_ranks("sampler_without_step_refuses_auto", 2, std::chrono::seconds(60), {{-1, {auto_env}}});
  for (const auto& rr : refused) EXPECT_EQ(rr.exit_code, 0) << mt_dist_test::describe(refused);
}
