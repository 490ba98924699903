#include "mixtrain/core/storage.h"

#include <string>

#include "mixtrain/base/error.h"
#include "mixtrain/memory/allocator.h"
#include "mixtrain/memory/trace.h"

namespace mixtrain {

namespace {
memory::Allocator* allocator_of(size_t nbytes, Device device, bool pinned) {
  if (pinned) {
    MT_CHECK(device.is_cpu(), "pinned_memory: only CPU memory can be pinned, not memory on ", device);
    const std::string why = memory::pinned_memory_unavailable_reason();
    MT_CHECK(why.empty(), "pinned_memory: cannot allocate ", nbytes, " bytes of pinned host memory: ", why);
    return &memory::pinned_allocator();
  }
  return device.is_meta() ? nullptr : &memory::allocator_for(device);
}
}  // namespace

// The allocator is remembered, so a pinned block goes back to the pinned cache.
StorageImpl::StorageImpl(size_t nbytes, Device device, bool pinned)
    : nbytes_(nbytes), device_(device), pinned_(pinned), allocator_(allocator_of(nbytes, device, pinned)) {
  if (allocator_) data_ = allocator_->allocate(nbytes);
  // Meta storages are always reported (the dry run lists those alive when it starts); real ones
  // only while memory::record_step records.
  if (!allocator_ || memory::recording()) memory::detail::on_storage_created(this, nbytes, device);
}

StorageImpl::~StorageImpl() {
  if (!allocator_ || memory::recording()) memory::detail::on_storage_destroyed(this, device_);
  if (allocator_) allocator_->deallocate(data_);
}

}  // namespace mixtrain
