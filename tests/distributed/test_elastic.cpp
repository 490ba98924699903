// ElasticAgent in real processes, as a user's own trainer uses it: three ranks, one killed with
// SIGKILL in the middle of the run, the two left redo its step with the global batch re-split and
// end with one process's losses and weights; a member whose steps lag takes the newest state at a
// generation's start; a store that would die with rank 0 is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "mixtrain/mixtrain.h"
#include "compare.h"
#include "ranks.h"

namespace mt = mixtrain;
namespace dist = mixtrain::distributed;
namespace nn = mixtrain::nn;
using mt_dist_test::max_rel_diff;
using mt_dist_test::run_ranks;

namespace {

// The model of these tests, the same on every rank for a seed.
mt::nn::Sequential make_mlp(uint64_t seed) {
  mt::manual_seed(seed);
  return mt::nn::Sequential(mt::nn::Linear(6, 24), mt::nn::Tanh(), mt::nn::Linear(24, 2));
}

// A digest of tensors' bytes (equal on two ranks iff, but for collisions, the bytes are).
int64_t digest(const std::vector<mt::Tensor>& tensors) {
  uint64_t h = 1469598103934665603ull;
  for (const mt::Tensor& t : tensors) {
    const mt::Tensor c = t.contiguous();
    const auto* p = static_cast<const unsigned char*>(c.raw_data());
    for (size_t i = 0; i < c.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  return static_cast<int64_t>(h >> 1);
}

}  // namespace

// Twelve AdamW steps of a global batch of 30 rows, split 1:1:1 then (rank 2 killed at step 5 by
// MIXTRAIN_TEST_KILL) 1:1 between the two left.
MT_SCENARIO(elastic_survivors) {
  const int64_t global = 30, steps = 12;
  mt::Generator gen;
  gen.manual_seed(31);
  const mt::Tensor X = mt::randn({global * steps, 6}, gen), Y = mt::randn({global * steps, 2}, gen);
  auto model = make_mlp(5);
  mt::optim::AdamW opt(model->parameters(), mt::optim::AdamWOptions(0.02));
  mt::amp::GradScaler scaler(mt::amp::GradScalerOptions().enabled(false));
  const bool hang = std::getenv("MT_HANG") != nullptr;
  const std::chrono::seconds timeout(hang ? 2 : 3);
  dist::ElasticAgent agent(dist::ElasticOptions().timeout(timeout));
  agent.set_state({&*model, &opt, &scaler, nullptr, {}, {}});
  std::unique_ptr<nn::DistributedDataParallel> ddp;
  int changes = 0;
  agent.on_change([&](const dist::MembershipChange&) {
    ++changes;
    ddp->set_process_group(agent.group());
  });
  agent.start();
  ddp = std::make_unique<nn::DistributedDataParallel>(model, agent.group());
  auto reference = make_mlp(5);
  mt::optim::AdamW ref_opt(reference->parameters(), mt::optim::AdamWOptions(0.02));
  for (int64_t step = agent.steps() + 1; step <= steps; ++step) {
    dist::kill_if_asked(step);
    if (hang && agent.rank() == 2 && step == 5) {
      // Stops calling collectives for twice the timeout, as a stalled process would, then leaves.
      std::this_thread::sleep_for(2 * timeout);
      return 0;
    }
    double loss = 0;
    int attempts = 0;
    agent.run_step([&](int attempt) {
      attempts = attempt + 1;
      const auto sizes = dist::DistributedSampler::split(global, agent.weights());
      int64_t begin = (step - 1) * global;
      for (int q = 0; q < agent.rank(); ++q) begin += sizes[static_cast<size_t>(q)];
      const int64_t rows = sizes[static_cast<size_t>(agent.rank())];
      opt.zero_grad();
      ddp->prepare_forward();
      const mt::Tensor out = model->forward(X.narrow(0, begin, rows).contiguous());
      ddp->set_local_batch(rows, global);
      const mt::Tensor l = mt::nn::functional::mse_loss(out, Y.narrow(0, begin, rows).contiguous());
      mt::Tensor sum = l.detach() * ddp->gradient_weight();
      dist::Work w = agent.group()->all_reduce_async(sum);
      ddp->scale_loss(l).backward();
      opt.step();
      w.wait();
      loss = sum.item<double>();
    });
    if (step < steps) agent.step_boundary();
    ref_opt.zero_grad();
    const mt::Tensor l = mt::nn::functional::mse_loss(reference->forward(X.narrow(0, (step - 1) * global, global)),
                                                      Y.narrow(0, (step - 1) * global, global));
    l.backward();
    ref_opt.step();
    SC_CHECK(std::abs(loss - l.item<double>()) <= 1e-5 * std::max(1.0, std::abs(l.item<double>())));
    SC_CHECK(attempts == (step == 5 ? 2 : 1));  // the interrupted step, redone once
  }
  SC_CHECK(max_rel_diff(model->parameters(), reference->parameters()) < 1e-5);
  SC_CHECK(agent.world_size() == 2 && changes == 1 && agent.changes().size() == 1);
  const dist::MembershipChange& c = agent.changes()[0];
  SC_CHECK(c.cause == "failure" && c.lost.size() == 1 && c.world_before == 3 && c.world_after == 2 && c.redo);
  SC_CHECK(c.lost[0].find("rank 2") == 0);
  SC_CHECK(c.step == 4);
  // A kill is noticed at once (the connection closes), a stalled rank at the timeout; then the
  // agreement waits at most its window (a few steps here, at least 0.25 s).
  SC_CHECK(c.seconds_lost < (hang ? 2.0 + 1.5 : 1.5));
  SC_CHECK(!hang || c.seconds_lost >= 2.0);
  return 0;
}

TEST(Elastic, SurvivorsRedoTheStepWithTheBatchResplitAndFollowOneProcess) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  const auto res = run_ranks("elastic_survivors", 3, std::chrono::seconds(50), {{-1, {"MIXTRAIN_TEST_KILL=2:5"}}});
  ASSERT_EQ(res.size(), 3u);
  EXPECT_EQ(res[0].exit_code, 0) << mt_dist_test::describe(res);
  EXPECT_EQ(res[1].exit_code, 0) << mt_dist_test::describe(res);
  EXPECT_EQ(res[2].exit_code, -1) << "rank 2 was to die by SIGKILL\n" << mt_dist_test::describe(res);
  EXPECT_NE(res[0].log.find("mixtrain elastic: generation 1 at step 4: lost rank 2"), std::string::npos) << res[0].log;
}

// Rank 1 starts two steps into training where ranks 0 and 2 are three in (same data, so those two
// agree bit for bit): at the first generation every rank ends with rank 0's parameters,
// optimizer state, scale, generator and extra.
MT_SCENARIO(elastic_behind) {
  const int launch_rank = dist::read_launch_env().rank;
  const bool behind = launch_rank == 1;
  auto model = make_mlp(behind ? 8 : 7);
  mt::optim::AdamW opt(model->parameters(), mt::optim::AdamWOptions(0.05));
  mt::amp::GradScaler scaler(mt::amp::GradScalerOptions().init_scale(behind ? 8.0 : 1024.0));
  mt::Generator gen;
  gen.manual_seed(behind ? 2 : 1);
  for (int s = 0; s < (behind ? 2 : 3); ++s) {
    opt.zero_grad();
    mt::nn::functional::mse_loss(model->forward(mt::randn({4, 6}, gen)), mt::randn({4, 2}, gen)).backward();
    opt.step();
  }
  mt::manual_seed(behind ? 123 : 456);
  nlohmann::json extra_seen;
  dist::ElasticAgent agent(dist::ElasticOptions().timeout(std::chrono::seconds(5)));
  agent.set_steps(behind ? 2 : 3);
  agent.set_state({&*model, &opt, &scaler, nullptr, [&] { return nlohmann::json{{"from", launch_rank}}; },
                   [&](const nlohmann::json& j) { extra_seen = j; }});
  agent.start();
  SC_CHECK(agent.steps() == 3);
  SC_CHECK(behind == !extra_seen.is_null());
  SC_CHECK(!behind || extra_seen.at("from").get<int>() == 0);
  std::vector<mt::Tensor> state = model->parameters();
  for (const auto& [name, t] : opt.state_tensors()) state.push_back(t);
  const mt::GeneratorState rng = mt::default_generator().state();
  const std::vector<int64_t> mine = {digest(state), static_cast<int64_t>(scaler.get_scale()),
                                     static_cast<int64_t>(rng.seed), static_cast<int64_t>(rng.offset),
                                     opt.steps_taken()};
  const auto all = agent.group()->all_gather(mt::from_vector(mine, {5}, mt::TensorOptions(mt::kInt64)));
  for (const auto& t : all) SC_CHECK(t.to_vector<int64_t>() == mine);
  SC_CHECK(mine[1] == 1024 && mine[4] == 3);
  return 0;
}

TEST(Elastic, SurvivorsOfARankThatStopsCallingCollectivesGoOnAfterTheTimeout) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  const auto res = run_ranks("elastic_survivors", 3, std::chrono::seconds(50), {{-1, {"MT_HANG=1"}}});
  for (const auto& r : res) ASSERT_EQ(r.exit_code, 0) << mt_dist_test::describe(res);
  EXPECT_NE(res[0].log.find("timeout 2000 ms"), std::string::npos) << res[0].log;
}

TEST(Elastic, AMemberBehindTakesTheNewestStateAtAGenerationsStart) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  const auto res = run_ranks("elastic_behind", 3, std::chrono::seconds(50));
  for (const auto& r : res) ASSERT_EQ(r.exit_code, 0) << mt_dist_test::describe(res);
}

TEST(Elastic, RefusesAStoreThatDiesWithRankZero) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  try {
    dist::ElasticAgent agent(dist::ElasticOptions().store("tcp://127.0.0.1:29999"));
    FAIL() << "an elastic agent on a store that rank 0 serves was accepted";
  } catch (const mt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("outlives every rank"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("mixtrain launch --elastic"), std::string::npos) << e.what();
  }
}
