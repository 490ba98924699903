#pragma once
// Internal: how a device backend hands the memory layer its BackingAllocator. The memory layer
// sits below the backends, so it cannot call cudaMalloc itself; the CUDA backend registers a
// factory (before its first allocation) and allocator_for(Device::cuda(i)) wraps what it makes
// in the same CachingAllocator the CPU uses.
#include <functional>
#include <memory>

#include "mixtrain/base/device.h"
#include "mixtrain/memory/caching_allocator.h"

namespace mixtrain::memory {

// Makes the backing allocator of device `index`; returns nullptr when that device does not exist.
using BackingFactory = std::function<std::unique_ptr<BackingAllocator>(int index)>;

// Replaces the factory of a device type (the CPU's defaults to SystemBackingAllocator). Devices
// whose allocator was already created keep it.
void register_backing_factory(DeviceType type, BackingFactory factory);
bool has_backing_factory(DeviceType type);

// The pinned host memory backing (cudaHostAlloc), registered by the CUDA backend. The factory's
// argument is unused (0); it returns nullptr when there is no CUDA device.
void register_pinned_backing_factory(BackingFactory factory);

// A new backing allocator of `device` from the registered factory (the CPU's default is
// SystemBackingAllocator); nullptr when that device does not exist. Benchmarks use it to compare
// the caching allocator with the raw one on every device.
std::unique_ptr<BackingAllocator> make_backing(Device device);

}  // namespace mixtrain::memory
