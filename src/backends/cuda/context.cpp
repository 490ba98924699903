// Device discovery, per-device contexts, the cudaMalloc backing of the caching allocator, and the
// public mixtrain::cuda functions.
#include "backends/cuda/context.h"

#include <array>
#include <atomic>
#include <memory>
#include <mutex>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/pinned.h"
#include "backends/cuda/workspace.h"
#include "memory/backing.h"
#include "mixtrain/base/device.h"

namespace mixtrain::backends::cuda {

namespace {

constexpr int kMaxDevices = 64;

// cudaMalloc behind the device-agnostic CachingAllocator (src/memory). A refusal clears the
// sticky-free error state so the allocator can release its cache and retry.
class CudaBackingAllocator final : public memory::BackingAllocator {
 public:
  explicit CudaBackingAllocator(int index) : index_(index) {}
  void* alloc(size_t nbytes) override {
    MT_CUDA_CHECK(cudaSetDevice(index_));
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, nbytes);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    MT_CUDA_CHECK(err);
    return p;
  }
  void free(void* ptr, size_t) override {
    MT_CUDA_CHECK(cudaSetDevice(index_));
    MT_CUDA_CHECK(cudaFree(ptr));
  }
  size_t free_device_memory() override {
    MT_CUDA_CHECK(cudaSetDevice(index_));
    size_t free_bytes = 0, total = 0;
    MT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    return free_bytes;
  }
  std::string name() const override { return "cudaMalloc"; }

 private:
  int index_;
};

// Registered before main: the memory layer sits below the backends and cannot call cudaMalloc
// itself. Nothing touches the driver until a CUDA allocation is asked for.
const bool g_backing_registered = [] {
  memory::register_backing_factory(DeviceType::CUDA, [](int index) -> std::unique_ptr<memory::BackingAllocator> {
    if (index < 0 || index >= mixtrain::cuda::device_count()) return nullptr;
    return std::make_unique<CudaBackingAllocator>(index);
  });
  return true;
}();

struct Registry {
  std::mutex mutex;
  std::array<std::atomic<DeviceContext*>, kMaxDevices> contexts{};
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: tensors may be freed after main returns
  return *r;
}

thread_local int t_current_device = -1;

void make_current(int index) {
  if (t_current_device != index) {
    MT_CUDA_CHECK(cudaSetDevice(index));
    t_current_device = index;
  }
}

}  // namespace

cudnnHandle_t DeviceContext::cudnn() {
  if (!cudnn_) {
    static std::mutex mutex;
    std::lock_guard<std::mutex> lock(mutex);
    if (!cudnn_) {
      cudnnHandle_t h = nullptr;
      MT_CUDNN_CHECK(cudnnCreate(&h));
      MT_CUDNN_CHECK(cudnnSetStream(h, stream));
      cudnn_ = h;
    }
  }
  return cudnn_;
}

DeviceContext& context(int index) {
  MT_CHECK(index >= 0 && index < mixtrain::cuda::device_count(), "cuda: device ", index, " does not exist (",
           mixtrain::cuda::device_count(), " CUDA devices)");
  make_current(index);
  Registry& r = registry();
  if (DeviceContext* c = r.contexts[index].load(std::memory_order_acquire)) return *c;
  std::lock_guard<std::mutex> lock(r.mutex);
  if (DeviceContext* c = r.contexts[index].load(std::memory_order_relaxed)) return *c;
  auto* c = new DeviceContext();
  c->index = index;
  MT_CUDA_CHECK(cudaGetDeviceProperties(&c->props, index));
  MT_CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  MT_CUBLAS_CHECK(cublasLtCreate(&c->lt));
  // The workspace comes from the caching allocator too (all device memory does), held forever.
  c->gemm_workspace = memory::allocator_for(Device::cuda(index)).allocate(kGemmWorkspaceBytes);
  c->gemm_workspace_bytes = kGemmWorkspaceBytes;
  r.contexts[index].store(c, std::memory_order_release);
  return *c;
}

DeviceContext& context(const Tensor& t) {
  MT_CHECK(t.device().is_cuda(), "cuda backend: expected a CUDA tensor, got ", t.summary());
  return context(t.device().index);
}

Tensor scratch(size_t bytes, Device device) {
  return Tensor::empty({static_cast<int64_t>((bytes + 7) / 8)}, TensorOptions(kInt64).device(device));
}

void read_back(const void* device_ptr, void* host_ptr, size_t bytes, DeviceContext& ctx) {
  MT_CUDA_CHECK(cudaMemcpyAsync(host_ptr, device_ptr, bytes, cudaMemcpyDeviceToHost, ctx.stream));
  MT_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}

}  // namespace mixtrain::backends::cuda

namespace mixtrain::cuda {

int device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();  // no driver or no device: CUDA is simply unavailable
      n = 0;
    }
    return n;
  }();
  return count;
}

bool is_available() { return device_count() > 0; }

void synchronize(int device) {
  if (!is_available()) return;
  if (device >= 0) {
    MT_CUDA_CHECK(cudaStreamSynchronize(backends::cuda::context(device).stream));
  } else {
    for (int d = 0; d < device_count(); ++d) MT_CUDA_CHECK(cudaStreamSynchronize(backends::cuda::context(d).stream));
  }
  // Pinned sources of the copies that just finished go back to the pinned cache.
  backends::cuda::release_finished_holds();
}

void* stream(int device) { return is_available() ? backends::cuda::context(device).stream : nullptr; }

std::string device_name(int device) {
  if (!is_available()) return "";
  return backends::cuda::context(device).props.name;
}

}  // namespace mixtrain::cuda
