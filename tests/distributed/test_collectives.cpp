// Process groups over Gloo in real processes: every collective's values, async handles, the
// launch contract's parsing, and a dead or silent rank ending the others with an Error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "mixtrain/mixtrain.h"
#include "mixtrain/distributed/process_group.h"
#include "ranks.h"

namespace mt = mixtrain;
namespace dist = mixtrain::distributed;
using mt_dist_test::run_ranks;

namespace {

bool have_gloo() { return dist::gloo_available(); }

// Every variable read_launch_env reads: tests that set their own, or need none, unset them all.
const char* const kLaunchVars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                                   "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_PROCID",
                                   "SLURM_NTASKS", "SLURM_LOCALID", "MASTER_ADDR", "MASTER_PORT"};

}  // namespace

MT_SCENARIO(collectives) {
  auto pg = dist::init_process_group();
  const int r = pg->rank(), n = pg->world_size();
  SC_CHECK(n == std::atoi(std::getenv("WORLD_SIZE")));
  // Sum, avg, max, min of rank-dependent values, in several dtypes.
  for (mt::DType dt : {mt::kFloat32, mt::kFloat64, mt::kFloat16, mt::kBFloat16, mt::kInt64}) {
    mt::Tensor t = mt::full({5}, static_cast<double>(r + 1), mt::TensorOptions(dt));
    pg->all_reduce(t, dist::ReduceOp::Sum);
    const double sum = n * (n + 1) / 2.0;
    for (double x : t.to(mt::kFloat64).to_vector<double>()) SC_CHECK(x == sum);
    mt::Tensor m = mt::full({3}, static_cast<double>(r), mt::TensorOptions(dt));
    pg->all_reduce(m, dist::ReduceOp::Max);
    for (double x : m.to(mt::kFloat64).to_vector<double>()) SC_CHECK(x == n - 1);
    mt::Tensor mn = mt::full({3}, static_cast<double>(r), mt::TensorOptions(dt));
    pg->all_reduce(mn, dist::ReduceOp::Min);
    for (double x : mn.to(mt::kFloat64).to_vector<double>()) SC_CHECK(x == 0);
  }
  mt::Tensor a = mt::full({4}, 2.0 * r);
  pg->all_reduce(a, dist::ReduceOp::Avg);
  for (float x : a.to_vector<float>()) SC_CHECK(x == static_cast<float>(n - 1));
  // Broadcast from the last rank.
  mt::Tensor b = mt::full({2, 3}, static_cast<double>(r * 10));
  pg->broadcast(b, n - 1);
  for (float x : b.to_vector<float>()) SC_CHECK(x == static_cast<float>((n - 1) * 10));
  // All-gather: rank order.
  const auto g = pg->all_gather(mt::full({2}, static_cast<double>(r)));
  SC_CHECK(static_cast<int>(g.size()) == n);
  for (int k = 0; k < n; ++k) SC_CHECK(g[static_cast<size_t>(k)].to_vector<float>()[1] == static_cast<float>(k));
  // Async: several in flight, completed in order.
  std::vector<mt::Tensor> ts;
  std::vector<dist::Work> ws;
  for (int k = 0; k < 4; ++k) {
    ts.push_back(mt::full({1000}, static_cast<double>(k + r)));
    ws.push_back(pg->all_reduce_async(ts.back()));
  }
  for (int k = 0; k < 4; ++k) {
    ws[static_cast<size_t>(k)].wait();
    SC_CHECK(ws[static_cast<size_t>(k)].is_completed());
    SC_CHECK(ts[static_cast<size_t>(k)].to_vector<float>()[999] == static_cast<float>(n * k + n * (n - 1) / 2));
  }
  pg->barrier_async().wait();
  // A strided view is refused with a clear error.
  mt::Tensor m2 = mt::zeros({3, 4});
  mt::Tensor view = m2.t();
  try {
    pg->all_reduce(view);
    return 1;
  } catch (const mt::Error& e) {
    SC_CHECK(std::strstr(e.what(), "not dense") != nullptr);
  }
  dist::destroy_process_group();
  return 0;
}

TEST(Collectives, TwoAndThreeRanks) {
  if (!have_gloo()) GTEST_SKIP() << dist::unavailable_reason();
  for (int world : {2, 3}) {
    const auto res = run_ranks("collectives", world, std::chrono::seconds(50));
    for (const auto& r : res) ASSERT_EQ(r.exit_code, 0) << mt_dist_test::describe(res);
  }
}

// Rank 1 dies before the all-reduce; rank 0 must get an Error, not hang.
MT_SCENARIO(dead_rank) {
  // A generous timeout to start (a loaded machine starts processes slowly), a short one to fail.
  auto pg = dist::init_process_group(dist::ProcessGroupOptions().timeout(std::chrono::seconds(40)));
  pg->barrier();
  pg->set_timeout(std::chrono::seconds(5));
  if (pg->rank() == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the barrier's last bytes go out
    std::_Exit(0);
  }
  mt::Tensor t = mt::ones({100});
  try {
    pg->all_reduce(t);
  } catch (const mt::Error& e) {
    std::fprintf(stderr, "caught: %s\n", e.what());
    SC_CHECK(std::strstr(e.what(), "all_reduce") != nullptr);
    SC_CHECK(std::strstr(e.what(), "rank 0 of 2") != nullptr);
    SC_CHECK(std::strstr(e.what(), "timeout 5000 ms") != nullptr);
    // The group refuses further work instead of hanging.
    try {
      pg->barrier();
      return 1;
    } catch (const mt::Error& e2) {
      SC_CHECK(std::strstr(e2.what(), "unusable") != nullptr);
    }
    return 42;
  }
  return 1;
}

// Rank 1 is alive but stops calling collectives: rank 0 times out.
MT_SCENARIO(silent_rank) {
  auto pg = dist::init_process_group(dist::ProcessGroupOptions().timeout(std::chrono::seconds(40)));
  pg->barrier();
  pg->set_timeout(std::chrono::seconds(2));
  if (pg->rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(15));  // outlives rank 0's timeout by far
    std::_Exit(0);
  }
  mt::Tensor t = mt::ones({100});
  const auto start = std::chrono::steady_clock::now();
  try {
    pg->all_reduce(t);
  } catch (const mt::Error& e) {
    std::fprintf(stderr, "caught: %s\n", e.what());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "after %.2f s\n", s);
    SC_CHECK(s < 12.0);  // the 2 s timeout, not rank 1's exit at 15 s
    SC_CHECK(std::strstr(e.what(), "all_reduce[sum](float32 [100] on cpu) on rank 0 of 2 (peer ranks 1)") != nullptr);
    return 42;
  }
  return 1;
}

TEST(Collectives, DeadOrSilentRankEndsInAnErrorNotAHang) {
  if (!have_gloo()) GTEST_SKIP() << dist::unavailable_reason();
  for (const char* sc : {"dead_rank", "silent_rank"}) {
    const auto res = run_ranks(sc, 2, std::chrono::seconds(30));
    ASSERT_EQ(res[0].exit_code, 42) << sc << "\n" << mt_dist_test::describe(res);
    ASSERT_FALSE(res[1].timed_out) << mt_dist_test::describe(res);
  }
}

// A rank that never starts: the others' rendezvous ends with an Error naming the store.
MT_SCENARIO(missing_rank) {
  dist::ProcessGroupOptions o;
  o.timeout(std::chrono::seconds(2));
  try {
    dist::init_process_group(o);
  } catch (const mt::Error& e) {
    std::fprintf(stderr, "caught: %s\n", e.what());
    SC_CHECK(std::strstr(e.what(), "rendezvous") != nullptr);
    return 42;
  }
  return 1;
}

TEST(Collectives, MissingRankEndsTheRendezvous) {
  if (!have_gloo()) GTEST_SKIP() << dist::unavailable_reason();
  // WORLD_SIZE=2 but only one process started.
  const auto res = run_ranks("missing_rank", 1, std::chrono::seconds(30), {{-1, {"WORLD_SIZE=2"}}});
  ASSERT_EQ(res[0].exit_code, 42) << mt_dist_test::describe(res);
}

// A lighter job than "collectives": rendezvous, one all-reduce, leave.
MT_SCENARIO(one_all_reduce) {
  auto pg = dist::init_process_group();
  mt::Tensor t = mt::full({4}, static_cast<double>(pg->rank() + 1));
  pg->all_reduce(t);
  const float want = static_cast<float>(pg->world_size() * (pg->world_size() + 1) / 2);
  for (float x : t.to_vector<float>()) SC_CHECK(x == want);
  dist::destroy_process_group();
  return 0;
}

// Gloo's file store never overwrites a key. Jobs one after another in the same store directory
// (torchrun's fixed MASTER_PORT gives them the same one) must each start clean, and a key left by
// a job that died in its rendezvous is refused at once, naming the directory.
TEST(Collectives, JobsOneAfterAnotherShareAStoreDirectory) {
  if (!have_gloo()) GTEST_SKIP() << dist::unavailable_reason();
  char tmpl[] = "/tmp/mt-dist-reuse-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string store = "MIXTRAIN_STORE=file:" + dir + "/store";
  for (int job = 0; job < 2; ++job) {
    const auto res = run_ranks("one_all_reduce", 2, std::chrono::seconds(50), {{-1, {store}}});
    for (const auto& r : res) ASSERT_EQ(r.exit_code, 0) << "job " << job << "\n" << mt_dist_test::describe(res);
    EXPECT_TRUE(std::filesystem::is_empty(dir + "/store")) << "job " << job << " left keys in its store";
  }
  // A rank alone in a world of 2 publishes its address, waits 2 s for its peer and gives up.
  auto res = run_ranks("missing_rank", 1, std::chrono::seconds(30), {{-1, {store, "WORLD_SIZE=2"}}});
  ASSERT_EQ(res[0].exit_code, 42) << mt_dist_test::describe(res);
  ASSERT_FALSE(std::filesystem::is_empty(dir + "/store"));
  // Rank 0 cannot publish over the stale key; rank 1 reads the dead address and times out.
  res = run_ranks("one_all_reduce", 2, std::chrono::seconds(50), {{-1, {store, "MIXTRAIN_TIMEOUT_S=5"}}});
  for (const auto& r : res) EXPECT_NE(r.exit_code, 0) << mt_dist_test::describe(res);
  EXPECT_FALSE(res[0].timed_out || res[1].timed_out) << mt_dist_test::describe(res);
  EXPECT_NE(res[0].log.find("earlier job"), std::string::npos) << res[0].log;
  EXPECT_NE(res[0].log.find(dir + "/store"), std::string::npos) << res[0].log;
  std::filesystem::remove_all(dir);
}

// Without a launcher a process is a group of one; its store is a directory of its own, removed
// with the group, so runs one after another never meet each other's keys.
TEST(Collectives, ProcessAloneRendezvousesInAStoreOfItsOwn) {
  if (!have_gloo()) GTEST_SKIP() << dist::unavailable_reason();
  std::vector<std::pair<std::string, std::string>> saved;
  std::vector<const char*> vars(std::begin(kLaunchVars), std::end(kLaunchVars));
  vars.push_back("MIXTRAIN_STORE");
  for (const char* v : vars)
    if (const char* x = std::getenv(v)) saved.emplace_back(v, x), unsetenv(v);
  auto stores = [] {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator("/tmp"))
      if (e.path().filename().string().rfind("mixtrain-store-", 0) == 0) out.push_back(e.path().string());
    return out;
  };
  const auto before = stores();
  for (int run = 0; run < 2; ++run) {
    auto pg = dist::new_process_group();
    EXPECT_EQ(pg->world_size(), 1);
    mt::Tensor t = mt::full({2}, 3.0);
    pg->all_reduce(t);
    EXPECT_EQ(t.to_vector<float>(), std::vector<float>({3.0f, 3.0f}));
    EXPECT_GT(stores().size(), before.size()) << "run " << run << ": no store directory of its own";
  }
  EXPECT_EQ(stores(), before) << "a private store directory outlived its group";
  for (const auto& [k, v] : saved) setenv(k.c_str(), v.c_str(), 1);
}

TEST(LaunchEnv, ReadsTorchrunOpenMpiAndSlurmVariables) {
  const auto& vars = kLaunchVars;
  for (const char* v : vars) unsetenv(v);
  EXPECT_EQ(dist::read_launch_env().source, "none");
  EXPECT_EQ(dist::read_launch_env().world_size, 1);
  setenv("SLURM_PROCID", "3", 1);
  setenv("SLURM_NTASKS", "8", 1);
  setenv("SLURM_LOCALID", "1", 1);
  auto e = dist::read_launch_env();
  EXPECT_EQ(e.source, "slurm");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  setenv("OMPI_COMM_WORLD_RANK", "2", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  EXPECT_EQ(dist::read_launch_env().source, "openmpi");
  EXPECT_EQ(dist::read_launch_env().rank, 2);
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("MASTER_ADDR", "node7", 1);
  setenv("MASTER_PORT", "29500", 1);
  e = dist::read_launch_env();
  EXPECT_EQ(e.source, "torchrun");
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.master_addr, "node7");
  EXPECT_EQ(e.master_port, 29500);
  setenv("RANK", "2", 1);  // not below WORLD_SIZE
  EXPECT_THROW(dist::read_launch_env(), mt::Error);
  setenv("RANK", "x", 1);
  try {
    dist::read_launch_env();
    ADD_FAILURE() << "a malformed RANK was accepted";
  } catch (const mt::Error& err) {
    EXPECT_NE(std::string(err.what()).find("RANK"), std::string::npos);
  }
  unsetenv("WORLD_SIZE");
  EXPECT_THROW(dist::read_launch_env(), mt::Error);  // RANK without WORLD_SIZE
  for (const char* v : vars) unsetenv(v);
  // Options that disagree with the environment are refused.
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "2", 1);
  EXPECT_THROW(dist::new_process_group(dist::ProcessGroupOptions().world_size(3)), mt::Error);
  for (const char* v : vars) unsetenv(v);
}

TEST(Collectives, SingleProcessGroupNeedsNoStoreAndIsIdentity) {
  if (!have_gloo()) GTEST_SKIP() << dist::unavailable_reason();
  char tmpl[] = "/tmp/mt-dist-single-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  auto pg = dist::new_process_group(dist::ProcessGroupOptions().rank(0).world_size(1).store("file:" + dir + "/s"));
  mt::Tensor t = mt::full({3}, 1.5);
  pg->all_reduce(t, dist::ReduceOp::Avg);
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>({1.5f, 1.5f, 1.5f}));
  EXPECT_EQ(pg->all_gather(t).size(), 1u);
  pg.reset();
  std::filesystem::remove_all(dir);
}

// NCCL at world size 1: compiled in CUDA builds, run where a GPU is present.
TEST(Nccl, AllReduceAndBroadcastOnCudaAtWorldSizeOne) {
  if (!dist::nccl_available()) GTEST_SKIP() << "this build has no NCCL (CUDA off): " << dist::unavailable_reason();
  if (!mt::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  if (!have_gloo()) GTEST_SKIP() << "NCCL's rendezvous needs Gloo's store: " << dist::unavailable_reason();
  char tmpl[] = "/tmp/mt-dist-nccl-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  auto pg = dist::new_process_group(dist::ProcessGroupOptions().rank(0).world_size(1).store("file:" + dir + "/s"));
  mt::Tensor t = mt::full({1000}, 2.5, mt::TensorOptions(mt::kFloat32).device(mt::Device::cuda()));
  pg->all_reduce(t, dist::ReduceOp::Sum);
  pg->broadcast(t, 0);
  const auto v = t.to(mt::Device::cpu()).to_vector<float>();
  for (float x : v) ASSERT_EQ(x, 2.5f);
  const auto g = pg->all_gather(t);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].to(mt::Device::cpu()).to_vector<float>()[999], 2.5f);
  pg.reset();
  std::filesystem::remove_all(dir);
}

// Ranks that call different collectives: every rank stops with an Error naming both calls,
// before Gloo sees buffers of different sizes (it used to abort the process from its own thread)
// or of different types (it used to reduce the bytes as they came).
MT_SCENARIO(mismatched_collectives) {
  auto pg = dist::init_process_group();
  const int r = pg->rank();
  const char* which = std::getenv("MT_MISMATCH");
  SC_CHECK(which != nullptr);
  mt::Tensor t = std::string(which) == "shape" ? mt::ones({r == 0 ? 4 : 100000})
                                               : (r == 0 ? mt::ones({8}) : mt::ones({4}, mt::TensorOptions(mt::kFloat64)));
  try {
    pg->all_reduce(t);
  } catch (const mt::Error& e) {
    std::fprintf(stderr, "caught: %s\n", e.what());
    const std::string what = e.what();
    SC_CHECK(what.find(std::string("rank ") + (r == 0 ? "1" : "0") + " called all_reduce[sum]") != std::string::npos);
    if (std::string(which) == "shape") SC_CHECK(what.find("100000 elements") != std::string::npos);
    if (std::string(which) == "dtype") SC_CHECK(what.find("float64 [4]") != std::string::npos);
    SC_CHECK(what.find("same collectives") != std::string::npos);
    return 42;
  }
  return 1;
}

TEST(Collectives, MismatchedShapesOrDtypesAreAnErrorOnEveryRank) {
  if (!have_gloo()) GTEST_SKIP() << dist::unavailable_reason();
  for (const char* which : {"shape", "dtype"}) {
    const auto res = run_ranks("mismatched_collectives", 2, std::chrono::seconds(30),
                               {{-1, {std::string("MT_MISMATCH=") + which}}});
    for (const auto& r : res) EXPECT_EQ(r.exit_code, 42) << which << "\n" << mt_dist_test::describe(res);
  }
}
