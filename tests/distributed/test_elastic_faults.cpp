// ElasticAgent under faults outside a step, in real processes: a join request nobody stands behind
// (a joiner that died after writing it, or a stranger's) costs one admission and is never asked
// in again; a malformed one is ignored with a warning, and so is a malformed generation record;
// a rank lost in the first rendezvous or in DDP's construction leaves the others to go on as after
// any later loss; a setting that differs between ranks ends the job after max_attempts
// generations instead of one being proposed after another forever.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "distributed/internal.h"
#include "mixtrain/mixtrain.h"
#include "ranks.h"

namespace mt = mixtrain;
namespace dist = mixtrain::distributed;
using mt_dist_test::run_ranks;

namespace {

// Writes `records` (key under mixtrain/elastic/, value) into the job's store, as a process that
// then dies (or a stranger) would.
void write_records(const std::vector<std::pair<std::string, std::string>>& records) {
  const dist::LaunchEnv e = dist::read_launch_env();
  const dist::Deadline d(std::chrono::seconds(5));
  auto store = dist::open_store(dist::default_store_spec(e), e, d);
  for (const auto& [key, value] : records)
    store->set("mixtrain/elastic/" + key, std::vector<char>(value.begin(), value.end()), d);
}

// The elastic join requests `values` (join/0, join/1, ...).
void write_join_requests(const std::vector<std::string>& values) {
  std::vector<std::pair<std::string, std::string>> records;
  for (size_t k = 0; k < values.size(); ++k) records.emplace_back("join/" + std::to_string(k), values[k]);
  write_records(records);
}

// `steps` steps of one all-reduce each on the agent's group, through run_step and step_boundary.
int run_steps(dist::ElasticAgent& agent, int64_t steps) {
  for (int64_t step = agent.steps() + 1; step <= steps; ++step) {
    agent.run_step([&](int) {
      mt::Tensor t = mt::full({4}, 1.0);
      agent.group()->all_reduce(t);
      if (t.to_vector<float>()[0] != static_cast<float>(agent.world_size())) throw mt::Error("wrong sum");
    });
    if (step < steps) agent.step_boundary();
  }
  return 0;
}

}  // namespace

// Rank 0 writes a well-formed join request for a process that never comes (MT_JOIN_RECORDS=dead)
// or malformed ones (MT_JOIN_RECORDS=bad) before the job starts; twelve steps follow.
MT_SCENARIO(elastic_phantom_joiner) {
  const std::string kind = std::getenv("MT_JOIN_RECORDS");
  if (dist::read_launch_env().rank == 0) {
    if (kind == "dead") write_join_requests({R"({"id":"j1-dead","weight":1,"who":"a joiner that died"})"});
    else write_join_requests({"{not json", R"({"id":7})", R"({"id":"x","weight":-1,"who":"w"})", R"([1,2])"});
  }
  dist::ElasticAgent agent(dist::ElasticOptions().timeout(std::chrono::seconds(2)));
  agent.start();
  const auto start = std::chrono::steady_clock::now();
  SC_CHECK(run_steps(agent, 12) == 0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "12 steps in %.2f s, %zu changes, world %d\n", seconds, agent.changes().size(),
               agent.world_size());
  SC_CHECK(agent.world_size() == 3);
  if (kind == "dead") {
    // One admission that fails at the timeout (2 s) and the recovery after it, then none.
    SC_CHECK(agent.changes().size() == 1);
    SC_CHECK(agent.changes()[0].cause == "failure" && agent.changes()[0].lost.empty());
    SC_CHECK(seconds < 2.0 + 3.0);
  } else {
    SC_CHECK(agent.changes().empty());
    SC_CHECK(seconds < 3.0);
  }
  return 0;
}

TEST(ElasticFaults, AJoinRequestNobodyStandsBehindCostsOneAdmissionOnly) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  const auto res = run_ranks("elastic_phantom_joiner", 3, std::chrono::seconds(40), {{-1, {"MT_JOIN_RECORDS=dead"}}});
  for (const auto& r : res) ASSERT_EQ(r.exit_code, 0) << mt_dist_test::describe(res);
}

TEST(ElasticFaults, MalformedJoinRequestsAreIgnoredWithAWarning) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  const auto res = run_ranks("elastic_phantom_joiner", 3, std::chrono::seconds(40), {{-1, {"MT_JOIN_RECORDS=bad"}}});
  for (const auto& r : res) ASSERT_EQ(r.exit_code, 0) << mt_dist_test::describe(res);
  for (const char* why :
       {"ignoring join request 0 in the store: not a JSON object", "join request 1 in the store: no id",
        "join request 2 in the store: no positive weight", "join request 3 in the store: not a JSON"})
    EXPECT_NE(res[0].log.find(why), std::string::npos) << why << "\n" << res[0].log;
}

// Rank 2 of 3 dies before the first rendezvous completes (MT_DIE=before: it never publishes;
// MT_DIE=gloo: after its rendezvous key, before Gloo connects): ranks 0 and 1 form the next
// generation after the timeout and train on.
MT_SCENARIO(elastic_lost_at_start) {
  const std::string when = std::getenv("MT_DIE");
  const int launch_rank = dist::read_launch_env().rank;
  if (launch_rank == 2 && when == "before") ::kill(::getpid(), SIGKILL);
  if (launch_rank == 2 && when == "gloo") {
    // Publishes its rendezvous record as the agent would, then dies before Gloo's mesh.
    const dist::LaunchEnv e = dist::read_launch_env();
    const dist::Deadline d(std::chrono::seconds(5));
    auto store = dist::open_store(dist::default_store_spec(e), e, d);
    const std::string mine = "world=3 rank=2 host=x pid=1 addr=127.0.0.1 check=1 run=-";
    store->set("mixtrain/elastic/g0/pg/mixtrain/join/2", std::vector<char>(mine.begin(), mine.end()), d);
    ::kill(::getpid(), SIGKILL);
  }
  dist::ElasticAgent agent(dist::ElasticOptions().timeout(std::chrono::seconds(2)));
  agent.start();
  SC_CHECK(agent.world_size() == 2 && agent.generation() == 1);
  SC_CHECK(agent.changes().size() == 1 && agent.changes()[0].cause == "failure");
  SC_CHECK(agent.changes()[0].lost.size() == 1 && agent.changes()[0].lost[0].find("rank 2") == 0);
  return run_steps(agent, 4);
}

TEST(ElasticFaults, ARankLostInTheFirstRendezvousLeavesTheOthersToGoOn) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  for (const char* when : {"MT_DIE=before", "MT_DIE=gloo"}) {
    const auto res = run_ranks("elastic_lost_at_start", 3, std::chrono::seconds(40), {{-1, {when}}});
    EXPECT_EQ(res[0].exit_code, 0) << when << "\n" << mt_dist_test::describe(res);
    EXPECT_EQ(res[1].exit_code, 0) << when << "\n" << mt_dist_test::describe(res);
    EXPECT_EQ(res[2].exit_code, -1) << when << "\n" << mt_dist_test::describe(res);
  }
}

// Before the job starts, rank 0 writes generations 1 to 3's records as a stranger would, each
// malformed in its own way; rank 2 dies at step 3. The survivors pass over the three (each
// saying why) and form generation 4 (they once died of nlohmann's parse_error, or of its
// type_error on a record's fields).
MT_SCENARIO(elastic_bad_generation_records) {
  if (dist::read_launch_env().rank == 0)
    write_records({{"g1/members", "{not json"},
                   {"g2/members", R"({"members":[{"id":"r0","weight":1}],"cause":"failure"})"},
                   {"g3/members", R"({"members":[{"id":"r0","weight":1,"who":"w"}],"next_join":"soon"})"}});
  dist::ElasticAgent agent(dist::ElasticOptions().timeout(std::chrono::seconds(2)));
  agent.start();
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = 1; step <= 6; ++step) {
    dist::kill_if_asked(step);
    agent.run_step([&](int) {
      mt::Tensor t = mt::full({4}, 1.0);
      agent.group()->all_reduce(t);
      if (t.to_vector<float>()[0] != static_cast<float>(agent.world_size())) throw mt::Error("wrong sum");
    });
    if (step < 6) agent.step_boundary();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "6 steps in %.2f s, generation %lld\n", seconds, static_cast<long long>(agent.generation()));
  SC_CHECK(agent.world_size() == 2 && agent.generation() == 4);
  SC_CHECK(agent.changes().size() == 1 && agent.changes()[0].lost.size() == 1);
  SC_CHECK(seconds < 2.0 + 3.0);
  return 0;
}

TEST(ElasticFaults, MalformedGenerationRecordsArePassedOverWithAMessage) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  const auto res =
      run_ranks("elastic_bad_generation_records", 3, std::chrono::seconds(40), {{-1, {"MIXTRAIN_TEST_KILL=2:3"}}});
  EXPECT_EQ(res[2].exit_code, -1) << mt_dist_test::describe(res);
  for (size_t r : {0u, 1u}) {
    ASSERT_EQ(res[r].exit_code, 0) << mt_dist_test::describe(res);
    for (const char* why :
         {"ignoring generation record mixtrain/elastic/g1/members in the store: not a JSON object",
          "g2/members in the store: member 0: no who", "g3/members in the store: next_join is not a count"})
      EXPECT_NE(res[r].log.find(why), std::string::npos) << why << "\n" << res[r].log;
  }
}

// Rank 1 does not check its collectives (MIXTRAIN_CHECK_COLLECTIVES=0), rank 0 does: every
// generation's rendezvous fails at once on the difference. The members used to propose the next
// generation, and the next, without end; now they stop after max_attempts (3 here) with the cause.
MT_SCENARIO(elastic_settings_differ) {
  dist::ElasticAgent agent(dist::ElasticOptions().timeout(std::chrono::seconds(2)).max_attempts(3));
  try {
    agent.start();
  } catch (const mt::Error& e) {
    const std::string what = e.what();
    std::fprintf(stderr, "start: %s\n", what.c_str());
    SC_CHECK(what.find("3 generations in a row (1 to 3) could not be formed") != std::string::npos);
    SC_CHECK(what.find("checks its collectives' shapes") != std::string::npos);
    return 0;
  }
  return 1;
}

TEST(ElasticFaults, ASettingThatDiffersBetweenRanksEndsTheJobAfterMaxAttempts) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  const auto res =
      run_ranks("elastic_settings_differ", 2, std::chrono::seconds(30), {{1, {"MIXTRAIN_CHECK_COLLECTIVES=0"}}});
  for (const auto& r : res) {
    EXPECT_EQ(r.exit_code, 0) << mt_dist_test::describe(res);
    EXPECT_LT(r.seconds, 3 * (2.0 + 1.0)) << mt_dist_test::describe(res);  // each attempt within its timeout + 1 s
  }
}
