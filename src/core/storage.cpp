#include "mixtrain/core/storage.h"

#include "mixtrain/memory/allocator.h"
#include "mixtrain/memory/trace.h"

namespace mixtrain {

StorageImpl::StorageImpl(size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device),
      allocator_(device.is_meta() ? nullptr : &memory::allocator_for(device)) {
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
