#include "mixtrain/core/storage.h"

#include "mixtrain/memory/allocator.h"

namespace mixtrain {

StorageImpl::StorageImpl(size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), allocator_(&memory::allocator_for(device)) {
  data_ = allocator_->allocate(nbytes);
}

StorageImpl::~StorageImpl() { allocator_->deallocate(data_); }

}  // namespace mixtrain
