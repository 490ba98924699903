#pragma once
// A block of device memory owned by the allocator of its device; shared by a tensor and its views.
#include <cstddef>
#include <memory>

#include "mixtrain/core/device.h"

namespace mixtrain {

namespace memory {
class Allocator;
}

class StorageImpl {
 public:
  StorageImpl(size_t nbytes, Device device);
  ~StorageImpl();
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  memory::Allocator* allocator_ = nullptr;
};

using Storage = std::shared_ptr<StorageImpl>;

}  // namespace mixtrain
