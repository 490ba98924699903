#pragma once
// A block of device memory owned by the allocator of its device; shared by a tensor and its views.
// A pinned storage is CPU memory from the page-locked allocator (memory::pinned_allocator), which
// it is freed back to; the CUDA backend copies from it asynchronously.
// A meta storage has a size but no memory (data() is null); while a memory::dry_run records, every
// storage's birth and death is reported to it (docs/MEMORY.md).
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "mixtrain/base/device.h"

namespace mixtrain {

namespace memory {
class Allocator;
}

class StorageImpl {
 public:
  StorageImpl(size_t nbytes, Device device, bool pinned = false);
  ~StorageImpl();
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool pinned() const { return pinned_; }

  // Bumped by every in-place write to the memory (through any tensor or view of it), so autograd
  // can tell that a tensor saved for backward changed after it was saved. On the storage, not on
  // the tensor, because views and detached handles share the memory and hence the count.
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> version_{0};
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  bool pinned_ = false;
  memory::Allocator* allocator_ = nullptr;
};

using Storage = std::shared_ptr<StorageImpl>;

}  // namespace mixtrain
