// A rank writing to a peer that died: the write fails (EPIPE, or a reset) and the collective ends
// in an Error naming the peer; SIGPIPE, ignored where the group is made, does not end the writer.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "mixtrain/distributed/process_group.h"
#include "mixtrain/mixtrain.h"
#include "ranks.h"

namespace mt = mixtrain;
namespace dist = mixtrain::distributed;

// Rank 1 dies after the barrier, while rank 0 all-reduces 64 MiB with it (more than the sockets
// hold, so rank 0 is still writing): an Error on rank 0 naming rank 1.
MT_SCENARIO(write_to_dead_peer) {
  auto pg = dist::init_process_group(dist::ProcessGroupOptions().timeout(std::chrono::seconds(40)));
  struct sigaction now {};
  SC_CHECK(sigaction(SIGPIPE, nullptr, &now) == 0);
  SC_CHECK(now.sa_handler == SIG_IGN);
  // Any write of the rank's to a peer that closed (here a socket pair's other end) fails with
  // EPIPE instead of ending it.
  int pair[2];
  SC_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) == 0);
  close(pair[1]);
  SC_CHECK(write(pair[0], "x", 1) == -1 && errno == EPIPE);
  close(pair[0]);
  pg->barrier();
  pg->set_timeout(std::chrono::seconds(10));
  if (pg->rank() == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // rank 0 is writing
    std::_Exit(0);
  }
  for (int attempt = 0; attempt < 3; ++attempt) {
    mt::Tensor t = mt::ones({1 << 24});
    try {
      pg->all_reduce(t);
    } catch (const mt::Error& e) {
      std::fprintf(stderr, "caught: %s\n", e.what());
      SC_CHECK(std::strstr(e.what(), "on rank 0 of 2 (peer ranks 1)") != nullptr);
      return 42;
    }
  }
  return 1;
}

TEST(DeadPeer, AWriteToADeadPeerIsAnErrorNotSigpipe) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  const auto res = mt_dist_test::run_ranks("write_to_dead_peer", 2, std::chrono::seconds(40));
  EXPECT_EQ(res[0].exit_code, 42) << mt_dist_test::describe(res);
  EXPECT_FALSE(res[1].timed_out) << mt_dist_test::describe(res);
}

// A program's own SIGPIPE handler is kept.
MT_SCENARIO(own_sigpipe_handler) {
  struct sigaction mine {};
  mine.sa_handler = [](int) {};
  sigemptyset(&mine.sa_mask);
  SC_CHECK(sigaction(SIGPIPE, &mine, nullptr) == 0);
  auto pg = dist::init_process_group(dist::ProcessGroupOptions().timeout(std::chrono::seconds(40)));
  struct sigaction now {};
  SC_CHECK(sigaction(SIGPIPE, nullptr, &now) == 0);
  SC_CHECK(now.sa_handler == mine.sa_handler);
  pg->barrier();
  dist::destroy_process_group();
  return 0;
}

TEST(DeadPeer, AProgramsOwnSigpipeHandlerIsKept) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  const auto res = mt_dist_test::run_ranks("own_sigpipe_handler", 2, std::chrono::seconds(40));
  for (const auto& r : res) EXPECT_EQ(r.exit_code, 0) << mt_dist_test::describe(res);
}
