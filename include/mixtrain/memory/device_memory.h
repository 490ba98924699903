#pragma once
// How many more bytes this process could allocate on a device: for sizing work before it starts
// (mixtrain launch --rank-batches auto sizes each rank's batch by it).
#include <cstdint>

#include "mixtrain/core/device.h"

namespace mixtrain::memory {

// The device's free memory as its backing allocator reports it (cudaMemGetInfo for a CUDA
// device; MemAvailable from /proc/meminfo for the CPU, which every process on the host shares),
// capped by the device allocator's limit (MIXTRAIN_MEMORY_LIMIT_MB) less what it has reserved,
// plus the free bytes its cache already holds. A snapshot for planning: other processes may take
// memory later. Throws mixtrain::Error for the meta device or a device without a backend.
int64_t available_bytes(Device device);

}  // namespace mixtrain::memory
