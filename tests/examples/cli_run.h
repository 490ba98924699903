#pragma once
// Runs the `mixtrain` program (MIXTRAIN_EXE) the way a user does, capturing its exit code, stdout
// and stderr; shared by the CLI tests.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace mixtrain::testing {

struct CliRun {
  int code = -1;
  std::string out, err;
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `mixtrain ARGS`, capturing stdout and stderr.
inline CliRun run_mixtrain(const std::string& args) {
  // Per process: ctest runs the tests of a file in parallel processes.
  const std::string base = ::testing::TempDir() + "mixtrain_run_" + std::to_string(::getpid());
  const std::string out = base + ".out", err = base + ".err";
  // Bounded: a check that fails to stop a long run must not hang the suite.
  const std::string cmd = "timeout -s KILL 300 " + std::string(MIXTRAIN_EXE) + " " + args + " >" + out + " 2>" + err +
                          " </dev/null";
  const int status = std::system(cmd.c_str());
  CliRun r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  std::remove(out.c_str());
  std::remove(err.c_str());
  return r;
}

}  // namespace mixtrain::testing
