#pragma once
// Runs a test scenario in N real processes on localhost: the test binary starts itself once per
// rank (gtest filter on the disabled worker test, scenario and rank in the environment), with a
// fresh file store, a watchdog that kills every child at the deadline, and each rank's output
// kept in a log that a failure prints.
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace mt_dist_test {

struct RankResult {
  int exit_code = -1;  // -1: killed by a signal (the watchdog's included)
  bool timed_out = false;
  double seconds = 0;  // from the start of every rank to this one's exit
  std::string log;
};

// Where a rank runs: a network namespace (support/netns.h) and a private /tmp; empty: here.
struct RankPlacement {
  std::string netns;
  std::string private_tmp;
};

// Runs `scenario` in `world` processes; extra_env entries are "NAME=value" (per rank: the map key;
// -1: every rank), placement one entry per rank (or none).
std::vector<RankResult> run_ranks(const std::string& scenario, int world, std::chrono::seconds deadline,
                                  const std::map<int, std::vector<std::string>>& extra_env = {},
                                  const std::vector<RankPlacement>& placement = {});
std::string describe(const std::vector<RankResult>& results);

// Scenario registry: a scenario returns the process's exit code (0: passed).
using Scenario = std::function<int()>;
bool register_scenario(const std::string& name, Scenario fn);

}  // namespace mt_dist_test

#define MT_SCENARIO(name)                                                                     \
  static int mt_scenario_##name();                                                            \
  static const bool mt_scenario_registered_##name =                                           \
      ::mt_dist_test::register_scenario(#name, &mt_scenario_##name);                          \
  static int mt_scenario_##name()

// Inside a scenario: a failed check prints where and returns exit code 1.
#define SC_CHECK(cond, ...)                                                                   \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      std::fprintf(stderr, "check failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);        \
      return 1;                                                                               \
    }                                                                                         \
  } while (0)
