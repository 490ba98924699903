// Jobs across hosts, started with torchrun's variables alone (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT): hosts are network namespaces with a private /tmp
// each (support/netns.h), rank 0 serves the rendezvous store at MASTER_ADDR:MASTER_PORT, and each
// rank advertises its address on the route to MASTER_ADDR. Training matches the same ranks on one
// host bit for bit; a rank that dies, a rendezvous that never completes and a world-size mismatch
// end every process within the timeout + 2 s with a message naming the cause, leave nothing
// behind, and the next job on the same port runs.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include "mixtrain/mixtrain.h"
#include "mixtrain/distributed/ddp.h"
#include "mixtrain/distributed/process_group.h"
#include "mixtrain/distributed/sampler.h"
#include "ranks.h"
#include "support/netns.h"

namespace mt = mixtrain;
namespace dist = mixtrain::distributed;
namespace nn = mixtrain::nn;
using mt_dist_test::RankPlacement;
using mt_dist_test::run_ranks;

namespace {

constexpr int kTimeoutS = 3;
const std::string kPort = "29500";

// The torchrun variables of a job of `hosts` x `per_host` ranks, rank r on host r / per_host,
// with MASTER_ADDR host 0's address: per rank, plus the placement on the hosts.
struct Job {
  std::map<int, std::vector<std::string>> env;
  std::vector<RankPlacement> placement;
};

Job torchrun_job(const mt_test::NetnsHosts& net, const std::vector<int>& host_of_rank, int world_size,
                 int master_host = -1) {
  Job j;
  std::map<int, int> per_host;
  for (int h : host_of_rank) ++per_host[h];
  std::map<int, int> seen;
  if (master_host < 0) master_host = host_of_rank.front();
  for (size_t r = 0; r < host_of_rank.size(); ++r) {
    const int h = host_of_rank[r];
    j.env[static_cast<int>(r)] = {"RANK=" + std::to_string(r),
                                  "WORLD_SIZE=" + std::to_string(world_size),
                                  "LOCAL_RANK=" + std::to_string(seen[h]++),
                                  "LOCAL_WORLD_SIZE=" + std::to_string(per_host[h]),
                                  "MASTER_ADDR=" + net.address(master_host),
                                  "MASTER_PORT=" + kPort};
    j.placement.push_back({net.netns(h), net.tmp_dir(h)});
  }
  j.env[-1] = {"MIXTRAIN_STORE=", "MIXTRAIN_TIMEOUT_S=" + std::to_string(kTimeoutS), "MIXTRAIN_WAIT_REPORT_S=1"};
  return j;
}

// The seconds the last "waited N s" of a rank's log names (its final error), or -1.
double last_wait_seconds(const std::string& log) {
  const size_t at = log.rfind("waited ");
  return at == std::string::npos ? -1.0 : std::strtod(log.c_str() + at + 7, nullptr);
}

std::string hexfloat(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08" PRIx32, bits);
  return buf;
}

// The lines a scenario prints with "result " in front, in order.
std::vector<std::string> results_of(const std::string& log) {
  std::vector<std::string> out;
  std::istringstream is(log);
  for (std::string line; std::getline(is, line);)
    if (line.rfind("result ", 0) == 0) out.push_back(line);
  return out;
}

}  // namespace

// Four steps of DDP with SGD on a small MLP, each rank on its share of a global batch of 24 (an
// uneven share with three ranks), loss scaled by the share before backward. Prints each step's
// global loss and every parameter's bits.
MT_SCENARIO(multihost_train) {
  auto pg = dist::init_process_group();
  const int r = pg->rank(), n = pg->world_size();
  mt::manual_seed(1000 + static_cast<uint64_t>(r));  // different inits: DDP broadcasts rank 0's
  nn::Sequential model(nn::Linear(8, 32), nn::ReLU(), nn::Linear(32, 4));
  nn::DistributedDataParallel ddp(model, pg, nn::DistributedDataParallelOptions().first_bucket_mb(0.001));
  mt::optim::SGD opt(model->parameters(), mt::optim::SGDOptions(0.05).momentum(0.9));
  std::vector<double> weights(static_cast<size_t>(n), 1.0);
  weights[0] = 2.0;
  dist::DistributedSampler sampler(96, 24, r, n, weights, /*shuffle=*/true, /*seed=*/3);
  mt::Generator gen;
  gen.manual_seed(11);
  const mt::Tensor X = mt::randn({96, 8}, gen), Y = mt::randn({96, 4}, gen);
  for (int64_t step = 0; step < 4; ++step) {
    const auto idx = sampler.batch(step);
    auto rows = [&](const mt::Tensor& src) {
      mt::Tensor out = mt::Tensor::empty({static_cast<int64_t>(idx.size()), src.size(1)});
      for (size_t k = 0; k < idx.size(); ++k) out.select(0, static_cast<int64_t>(k)).copy_(src.select(0, idx[k]));
      return out;
    };
    opt.zero_grad();
    ddp.prepare_forward();
    ddp.set_local_batch(static_cast<int64_t>(idx.size()), sampler.global_batch());
    const mt::Tensor loss = mt::nn::functional::mse_loss(model->forward(rows(X)), rows(Y));
    mt::Tensor global = loss.detach() * ddp.gradient_weight();
    ddp.scale_loss(loss).backward();
    opt.step();
    pg->all_reduce(global);
    std::printf("result loss %" PRId64 " %s\n", step, hexfloat(global.item<float>()).c_str());
  }
  std::string bits;
  for (const auto& p : model->parameters())
    for (float x : p.to_vector<float>()) bits += hexfloat(x);
  std::printf("result params %zu %s\n", bits.size(), std::to_string(std::hash<std::string>()(bits)).c_str());
  dist::destroy_process_group();
  return 0;
}

// Rendezvous and one all-reduce: the job that must run on the same port after each failure.
MT_SCENARIO(multihost_one_all_reduce) {
  auto pg = dist::init_process_group();
  mt::Tensor t = mt::full({4}, static_cast<double>(pg->rank() + 1));
  pg->all_reduce(t);
  SC_CHECK(t.to_vector<float>()[0] == static_cast<float>(pg->world_size() * (pg->world_size() + 1) / 2));
  dist::destroy_process_group();
  return 0;
}

// After a few collectives the last rank dies; every other rank gets an Error from its next
// collective within the timeout.
MT_SCENARIO(multihost_rank_dies) {
  auto pg = dist::init_process_group();
  mt::Tensor t = mt::ones({1000});
  for (int k = 0; k < 3; ++k) pg->all_reduce(t);
  if (pg->rank() == pg->world_size() - 1) std::_Exit(9);
  const auto start = std::chrono::steady_clock::now();
  try {
    for (int k = 0; k < 100000; ++k) pg->all_reduce(t);
  } catch (const mt::Error& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "caught after %.2f s: %s\n", s, e.what());
    SC_CHECK(s < kTimeoutS + 2.0);
    SC_CHECK(std::strstr(e.what(), "all_reduce") != nullptr);
    return 42;
  }
  return 1;
}

// The rendezvous alone: exits 42 with the Error's message on stderr.
MT_SCENARIO(multihost_rendezvous_fails) {
  try {
    dist::init_process_group();
  } catch (const mt::Error& e) {
    std::fprintf(stderr, "caught: %s\n", e.what());
    return 42;
  }
  return 1;
}

class MultiHost : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
    const std::string why = mt_test::NetnsHosts::unavailable_reason();
    if (!why.empty()) GTEST_SKIP() << why;
    mt_test::NetnsHosts::sweep_stale();
    net_ = std::make_unique<mt_test::NetnsHosts>(3);
  }
  void TearDown() override {
    if (!net_) return;
    EXPECT_TRUE(net_->processes().empty()) << "processes left in the hosts' namespaces";
    const auto files = net_->leftover_files();
    EXPECT_TRUE(files.empty()) << "files left in a host's /tmp, first: " << (files.empty() ? "" : files[0]);
    net_.reset();
  }
  // A job on the same hosts and port, to show the failure before it left nothing in the way.
  void next_job_runs() {
    const Job job = torchrun_job(*net_, {0, 1}, 2);
    const auto res = run_ranks("multihost_one_all_reduce", 2, std::chrono::seconds(30), job.env, job.placement);
    for (const auto& r : res) ASSERT_EQ(r.exit_code, 0) << "the next job on port " << kPort << "\n"
                                                        << mt_dist_test::describe(res);
  }
  std::unique_ptr<mt_test::NetnsHosts> net_;
};

TEST_F(MultiHost, TwoHostsTrainBitIdenticalToOneHost) {
  // Hosts 0 and 1 hold the ranks; host 2 runs all of them on its own, as one machine would.
  for (const std::vector<int>& layout : {std::vector<int>{0, 1}, std::vector<int>{0, 0, 1, 1}, std::vector<int>{0, 1, 1}}) {
    const int world = static_cast<int>(layout.size());
    const Job multi = torchrun_job(*net_, layout, world);
    const auto many = run_ranks("multihost_train", world, std::chrono::seconds(40), multi.env, multi.placement);
    for (const auto& r : many) ASSERT_EQ(r.exit_code, 0) << mt_dist_test::describe(many);
    const Job single = torchrun_job(*net_, std::vector<int>(layout.size(), 2), world);
    const auto one = run_ranks("multihost_train", world, std::chrono::seconds(40), single.env, single.placement);
    for (const auto& r : one) ASSERT_EQ(r.exit_code, 0) << mt_dist_test::describe(one);
    const auto expected = results_of(one[0].log);
    ASSERT_EQ(expected.size(), 5u) << one[0].log;
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(results_of(many[static_cast<size_t>(r)].log), expected) << "rank " << r << " of layout " << world;
      EXPECT_EQ(results_of(one[static_cast<size_t>(r)].log), expected) << "rank " << r << " on one host";
    }
  }
}

TEST_F(MultiHost, ARankThatDiesEndsEveryHostWithinTheTimeout) {
  const Job job = torchrun_job(*net_, {0, 0, 1, 1}, 4);
  const auto res = run_ranks("multihost_rank_dies", 4, std::chrono::seconds(40), job.env, job.placement);
  EXPECT_EQ(res[3].exit_code, 9) << mt_dist_test::describe(res);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(res[static_cast<size_t>(r)].exit_code, 42) << mt_dist_test::describe(res);
    EXPECT_FALSE(res[static_cast<size_t>(r)].timed_out);
  }
  next_job_runs();
}

TEST_F(MultiHost, ARendezvousThatNeverCompletesEndsWithinTheTimeout) {
  // WORLD_SIZE=3, but rank 2 never starts: ranks 0 and 1 name it, and report while they wait.
  Job job = torchrun_job(*net_, {0, 1}, 3);
  auto res = run_ranks("multihost_rendezvous_fails", 2, std::chrono::seconds(30), job.env, job.placement);
  for (const auto& r : res) {
    ASSERT_EQ(r.exit_code, 42) << mt_dist_test::describe(res);
    EXPECT_LT(r.seconds, kTimeoutS + 2.0) << mt_dist_test::describe(res);
    EXPECT_NE(r.log.find("missing: rank 2"), std::string::npos) << r.log;
    // Either this rank's own wait ran out (its error names the time waited, close to the
    // timeout), or the store's host, rank 0, ran out first and closed the store up to a second
    // earlier by this rank's clock: then rank 0's own error is the one close to the timeout.
    const bool store_closed = r.log.find("lost the store") != std::string::npos;
    const std::string& timed_log = store_closed ? res[0].log : r.log;
    EXPECT_GT(last_wait_seconds(timed_log), kTimeoutS - 0.5) << timed_log;
    EXPECT_NE(r.log.find("still missing: rank 2"), std::string::npos) << "no progress line:\n" << r.log;
  }
  next_job_runs();
  // Rank 0 never starts: rank 1 names the store it could not reach.
  job = torchrun_job(*net_, {1}, 2, /*master_host=*/0);
  job.env[0][0] = "RANK=1";
  res = run_ranks("multihost_rendezvous_fails", 1, std::chrono::seconds(30), job.env, job.placement);
  ASSERT_EQ(res[0].exit_code, 42) << mt_dist_test::describe(res);
  EXPECT_LT(res[0].seconds, kTimeoutS + 2.0);
  EXPECT_NE(res[0].log.find("rank 0's store at tcp://" + net_->address(0) + ":" + kPort), std::string::npos)
      << res[0].log;
  next_job_runs();
}

TEST_F(MultiHost, AWorldSizeMismatchIsNamedOnEveryHost) {
  Job job = torchrun_job(*net_, {0, 1}, 2);
  job.env[1][1] = "WORLD_SIZE=3";
  const auto res = run_ranks("multihost_rendezvous_fails", 2, std::chrono::seconds(30), job.env, job.placement);
  for (const auto& r : res) {
    ASSERT_EQ(r.exit_code, 42) << mt_dist_test::describe(res);
    EXPECT_LT(r.seconds, kTimeoutS + 2.0);
    EXPECT_NE(r.log.find("WORLD_SIZE=3"), std::string::npos) << r.log;
    EXPECT_NE(r.log.find("same world size"), std::string::npos) << r.log;
  }
  next_job_runs();
}
