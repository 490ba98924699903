// The cudaHostAlloc backing of the pinned host allocator, and the holds on pinned sources of
// asynchronous copies (pinned.h).
#include "backends/cuda/pinned.h"

#include <mutex>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "memory/backing.h"

namespace mixtrain::backends::cuda {

namespace {

// Page-locked host memory. Portable: usable by copies to every device, not only the one current
// when it was allocated (DataLoader workers allocate on threads that never chose a device).
// A refusal clears the error state so the caching allocator can release its cache and retry.
class PinnedBackingAllocator final : public memory::BackingAllocator {
 public:
  void* alloc(size_t nbytes) override {
    void* p = nullptr;
    const cudaError_t err = cudaHostAlloc(&p, nbytes, cudaHostAllocPortable);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    MT_CUDA_CHECK(err);
    return p;
  }
  void free(void* ptr, size_t) override { MT_CUDA_CHECK(cudaFreeHost(ptr)); }
  size_t free_device_memory() override { return host_.free_device_memory(); }
  std::string name() const override { return "cudaHostAlloc"; }

 private:
  memory::SystemBackingAllocator host_;  // only asked how much host memory is free
};

const bool g_pinned_registered = [] {
  memory::register_pinned_backing_factory([](int) -> std::unique_ptr<memory::BackingAllocator> {
    if (mixtrain::cuda::device_count() == 0) return nullptr;
    return std::make_unique<PinnedBackingAllocator>();
  });
  return true;
}();

struct Hold {
  cudaEvent_t done = nullptr;
  Storage storage;
};

struct Holds {
  std::mutex mutex;
  std::vector<Hold> list;
};

Holds& holds() {
  static Holds* h = new Holds();  // never destroyed: copies may still be queued at exit
  return *h;
}

}  // namespace

void hold_until_done(const Storage& storage, DeviceContext& ctx) {
  release_finished_holds();
  Hold hold;
  hold.storage = storage;
  // An event belongs to the device current at creation and must be recorded on its stream.
  MT_CUDA_CHECK(cudaSetDevice(ctx.index));
  MT_CUDA_CHECK(cudaEventCreateWithFlags(&hold.done, cudaEventDisableTiming));
  const cudaError_t err = cudaEventRecord(hold.done, ctx.stream);
  if (err != cudaSuccess) {
    (void)cudaEventDestroy(hold.done);  // already failing: report the record's error, not this one
    MT_CUDA_CHECK(err);
  }
  Holds& h = holds();
  std::lock_guard<std::mutex> lock(h.mutex);
  h.list.push_back(std::move(hold));
}

void release_finished_holds() {
  std::vector<Hold> finished;  // freed after the lock: freeing storage takes the allocator's lock
  Holds& h = holds();
  {
    std::lock_guard<std::mutex> lock(h.mutex);
    // Holds of several devices' streams complete out of order: look at each.
    for (size_t i = 0; i < h.list.size();) {
      const cudaError_t st = cudaEventQuery(h.list[i].done);
      if (st == cudaErrorNotReady) {
        ++i;
        continue;
      }
      MT_CUDA_CHECK(st);
      MT_CUDA_CHECK(cudaEventDestroy(h.list[i].done));
      finished.push_back(std::move(h.list[i]));
      h.list[i] = std::move(h.list.back());
      h.list.pop_back();
    }
  }
}

}  // namespace mixtrain::backends::cuda
