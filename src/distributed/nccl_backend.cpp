// The NCCL backend for CUDA tensors (one GPU per rank): rank 0 creates the unique id and
// publishes it through the group's rendezvous store; collectives run on the device's stream and
// the communication thread polls their completion against the timeout, aborting the
// communicator (ncclCommAbort) when a peer does not arrive. Built with MIXTRAIN_WITH_CUDA only.
#include "distributed/internal.h"
#include "mixtrain/base/error.h"
#include "mixtrain/config.h"

#if MIXTRAIN_WITH_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "backends/cuda/context.h"
#include "backends/cuda/cuda_check.h"

#define MT_NCCL_CHECK(expr)                                                                             \
  do {                                                                                                  \
    const ncclResult_t mt_nr_ = (expr);                                                                 \
    if (mt_nr_ != ncclSuccess && mt_nr_ != ncclInProgress)                                              \
      MT_ERROR("nccl: ", #expr, " failed: ", ncclGetErrorString(mt_nr_));                               \
  } while (0)
#endif

namespace mixtrain::distributed {

#if MIXTRAIN_WITH_CUDA

bool nccl_available() { return true; }

namespace {

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
    case DType::Float16: return ncclFloat16;
    case DType::BFloat16: return ncclBfloat16;
    case DType::Int32: return ncclInt32;
    case DType::Int64: return ncclInt64;
    default: MT_ERROR("distributed: dtype ", d, " is not supported by the NCCL backend");
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  return ncclSum;
}

class NcclBackend : public ProcessGroup::Backend {
 public:
  NcclBackend(KeyValueStore& store, const LaunchEnv& env, std::chrono::milliseconds timeout)
      : device_(env.local_rank), size_(env.world_size) {
    int count = 0;
    MT_CUDA_CHECK(cudaGetDeviceCount(&count));
    MT_CHECK(env.local_rank < count, "distributed NCCL: local rank ", env.local_rank, " has no GPU (", count,
             " visible); run one rank per GPU");
    MT_CUDA_CHECK(cudaSetDevice(device_));
    ncclUniqueId id;
    // The id exchange and the communicator's creation share one deadline.
    const Deadline deadline(timeout);
    if (env.rank == 0) {
      MT_NCCL_CHECK(ncclGetUniqueId(&id));
      store.set("mixtrain/nccl/id", std::vector<char>(id.internal, id.internal + sizeof(id.internal)), deadline);
    } else {
      WaitFor why;
      why.what = "NCCL's unique id";
      why.owners = {"rank 0"};
      const std::vector<char> v = store.get("mixtrain/nccl/id", deadline, why);
      MT_CHECK(v.size() == sizeof(id.internal), "distributed NCCL: the unique id in the store has ", v.size(),
               " bytes, expected ", sizeof(id.internal));
      std::memcpy(id.internal, v.data(), v.size());
    }
    // Non-blocking init so that a missing peer ends in our timeout rather than a hang.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    MT_NCCL_CHECK(ncclCommInitRankConfig(&comm_, env.world_size, id, env.rank, &config));
    wait_comm("ncclCommInitRank", std::max(deadline.left(), std::chrono::milliseconds(1)));
    // Every rank is in the communicator, so every rank has read the id.
    if (env.rank == 0) store.forget_own_keys();
  }

  ~NcclBackend() override {
    if (comm_) ncclCommDestroy(comm_);
  }

  const char* name() const override { return "nccl"; }

  void all_reduce(Tensor& t, ReduceOp op, std::chrono::milliseconds timeout) override {
    auto& ctx = backends::cuda::context(t);
    MT_NCCL_CHECK(
        ncclAllReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), nccl_op(op),
                      live("ncclAllReduce"), ctx.stream));
    finish(ctx.stream, "ncclAllReduce", timeout);
  }

  void broadcast(Tensor& t, int root, std::chrono::milliseconds timeout) override {
    auto& ctx = backends::cuda::context(t);
    MT_NCCL_CHECK(ncclBroadcast(t.raw_data(), t.raw_data(), t.nbytes(), ncclChar, root, live("ncclBroadcast"), ctx.stream));
    finish(ctx.stream, "ncclBroadcast", timeout);
  }

  void all_gather(const Tensor& t, std::vector<Tensor>& out, std::chrono::milliseconds timeout) override {
    auto& ctx = backends::cuda::context(t);
    Tensor flat = Tensor::empty({static_cast<int64_t>(size_) * t.numel()}, t.options());
    MT_NCCL_CHECK(ncclAllGather(t.raw_data(), flat.raw_data(), t.nbytes(), ncclChar, live("ncclAllGather"), ctx.stream));
    for (int r = 0; r < size_; ++r)
      MT_CUDA_CHECK(cudaMemcpyAsync(out[static_cast<size_t>(r)].raw_data(),
                                    static_cast<char*>(flat.raw_data()) + t.nbytes() * r, t.nbytes(),
                                    cudaMemcpyDeviceToDevice, ctx.stream));
    finish(ctx.stream, "ncclAllGather", timeout);
  }

  // In place when `output` is this rank's chunk of `input` (NCCL's own in-place convention).
  void reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op, std::chrono::milliseconds timeout) override {
    auto& ctx = backends::cuda::context(input);
    MT_NCCL_CHECK(ncclReduceScatter(input.raw_data(), output.raw_data(), static_cast<size_t>(output.numel()),
                                    nccl_type(input.dtype()), nccl_op(op), live("ncclReduceScatter"), ctx.stream));
    finish(ctx.stream, "ncclReduceScatter", timeout);
  }

  // In place when `input` is this rank's chunk of `output`.
  void all_gather_into(const Tensor& input, Tensor& output, std::chrono::milliseconds timeout) override {
    auto& ctx = backends::cuda::context(input);
    MT_NCCL_CHECK(ncclAllGather(input.raw_data(), output.raw_data(), input.nbytes(), ncclChar, live("ncclAllGather"),
                                ctx.stream));
    finish(ctx.stream, "ncclAllGather", timeout);
  }

  void barrier(std::chrono::milliseconds timeout) override {
    Tensor one = Tensor::empty({1}, TensorOptions(kFloat32).device(Device::cuda(device_)));
    MT_CUDA_CHECK(cudaMemset(one.raw_data(), 0, sizeof(float)));
    all_reduce(one, ReduceOp::Sum, timeout);
  }

 private:
  // Polls until the stream's work is done, the communicator reports an error, or the timeout.
  void finish(cudaStream_t stream, const char* what, std::chrono::milliseconds timeout) {
    wait_comm(what, timeout);  // a non-blocking communicator may still be enqueueing
    cudaEvent_t ev;
    MT_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    MT_CUDA_CHECK(cudaEventRecord(ev, stream));
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const cudaError_t q = cudaEventQuery(ev);
      if (q == cudaSuccess) break;
      if (q != cudaErrorNotReady) {
        cudaEventDestroy(ev);
        MT_CUDA_CHECK(q);
      }
      ncclResult_t async = ncclSuccess;
      const ncclResult_t asked = ncclCommGetAsyncError(comm_, &async);
      if (asked != ncclSuccess) async = asked;  // the query itself failed: as fatal as what it reports
      if (async != ncclSuccess && async != ncclInProgress) {
        cudaEventDestroy(ev);
        abort_comm();
        MT_ERROR(what, " failed: ", ncclGetErrorString(async));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        cudaEventDestroy(ev);
        abort_comm();
        MT_ERROR(what, " did not complete within ", timeout.count(), " ms; the communicator was aborted");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    MT_CUDA_CHECK(cudaEventDestroy(ev));
  }

  void wait_comm(const char* what, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      ncclResult_t st = ncclSuccess;
      const ncclResult_t q = ncclCommGetAsyncError(comm_, &st);
      if (q != ncclSuccess) st = q;
      if (st == ncclSuccess) return;
      if (st != ncclInProgress) {
        abort_comm();
        MT_ERROR("distributed NCCL: ", what, " failed: ", ncclGetErrorString(st));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        abort_comm();
        MT_ERROR("distributed NCCL: ", what, " did not complete within ", timeout.count(),
                 " ms (a rank did not join)");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  // After an abort the communicator is gone; NCCL would answer a null one with "invalid argument".
  ncclComm_t live(const char* what) const {
    MT_CHECK(comm_ != nullptr, "distributed NCCL: ", what, ": the communicator was aborted after an earlier ",
             "failure or timeout, so this group can no longer communicate CUDA tensors");
    return comm_;
  }

  void abort_comm() {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  int device_, size_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::unique_ptr<ProcessGroup::Backend> make_nccl_backend(KeyValueStore& store, const LaunchEnv& env,
                                                         std::chrono::milliseconds timeout) {
  return std::make_unique<NcclBackend>(store, env, timeout);
}

#else

bool nccl_available() { return false; }

std::unique_ptr<ProcessGroup::Backend> make_nccl_backend(KeyValueStore&, const LaunchEnv&,
                                                         std::chrono::milliseconds) {
  MT_ERROR("distributed: a CUDA tensor was passed to a collective. ", unavailable_reason());
}

#endif

}  // namespace mixtrain::distributed
