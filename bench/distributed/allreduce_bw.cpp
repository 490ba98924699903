// All-reduce bus bandwidth of one 25 MiB fp32 bucket: mixtrain's process group (communication
// thread, Work handles, the cross-rank check) beside Gloo's allreduce called directly on the same
// data, to show the wrapper's overhead. On one host, under the launcher:
//   mixtrain launch --nproc 2 -- build/bench/bench_dist_allreduce [MiB] [iterations]
// Between two hosts (network namespaces: bench/distributed/netns_allreduce.sh does the setup).
// Bus bandwidth = bytes / time * 2 (n - 1) / n (what a ring moves per rank, comparable to a link).
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "mixtrain/mixtrain.h"

namespace mt = mixtrain;
namespace dist = mixtrain::distributed;

int main(int argc, char** argv) {
  const double mib = argc > 1 ? std::atof(argv[1]) : 25.0;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 20;
  const auto n = static_cast<int64_t>(mib * 1024 * 1024 / 4);
  auto pg = dist::init_process_group();
  const int rank = pg->rank(), world = pg->world_size();
  mt::Tensor t = mt::ones({n});
  auto busbw = [&](double seconds) {
    return static_cast<double>(n) * 4 / seconds * 2.0 * (world - 1) / world / 1e9;
  };

  // Gloo directly: its own context, rendezvousing through a file store in a directory every rank
  // sees (one host, or `ip netns exec` hosts sharing the file system), emptied by rank 0 first,
  // on the interface our group uses (GLOO_SOCKET_IFNAME or MIXTRAIN_GLOO_HOST; else loopback).
  const char* port = std::getenv("MASTER_PORT");
  const char* store_env = std::getenv("MIXTRAIN_STORE");
  std::string dir = store_env && std::string(store_env).rfind("file:", 0) == 0
                        ? std::string(store_env).substr(5) + "-direct"
                        : std::string("/tmp/mt-bench-direct-") + (port ? port : "0");
  if (rank == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  pg->barrier();
  gloo::rendezvous::FileStore store(dir);
  gloo::transport::tcp::attr attr;
  const char* iface = std::getenv("GLOO_SOCKET_IFNAME");
  const char* host = std::getenv("MIXTRAIN_GLOO_HOST");
  if (iface && *iface) attr.iface = iface;
  else attr.hostname = host && *host ? host : "127.0.0.1";
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, world);
  ctx->connectFullMesh(store, dev);
  pg->barrier();  // everyone connected: the addresses can go
  if (rank == 0) std::filesystem::remove_all(dir);
  std::vector<float> buf(static_cast<size_t>(n), 1.0f);
  auto direct = [&] {
    gloo::AllreduceOptions opts(ctx);
    opts.setOutput(buf.data(), buf.size());
    opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    opts.setTag(7);
    gloo::allreduce(opts);
  };
  auto ours_once = [&] { pg->all_reduce(t); };

  // The machine is shared: alternate the two in rounds and keep each one's fastest iteration.
  double ours = 1e30, raw = 1e30;
  auto time_one = [&](auto&& fn) {
    pg->barrier();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (int i = 0; i < 2; ++i) ours_once(), direct();
  for (int i = 0; i < iters; ++i) {
    ours = std::min(ours, time_one(ours_once));
    raw = std::min(raw, time_one(direct));
  }
  pg->barrier();
  if (rank == 0)
    std::printf("all-reduce %.1f MiB fp32, %d ranks, %d rounds, fastest: mixtrain %.2f ms (busbw %.2f GB/s), "
                "gloo direct %.2f ms (busbw %.2f GB/s), overhead %+.1f%%\n",
                mib, world, iters, ours * 1e3, busbw(ours), raw * 1e3, busbw(raw), (ours / raw - 1) * 100);
  return 0;
}
