#pragma once
// How many more bytes this process could allocate on a device: for sizing work before it starts
// (mixtrain launch --rank-batches auto sizes each rank's batch by it).
#include <cstdint>
#include <string>

#include "mixtrain/base/device.h"

namespace mixtrain::memory {

// The device's free memory as its backing allocator reports it (cudaMemGetInfo for a CUDA
// device; MemAvailable from /proc/meminfo for the CPU, which every process on the host shares),
// capped by the device allocator's limit (MIXTRAIN_MEMORY_LIMIT_MB) less what it has reserved,
// plus the free bytes its cache already holds. A snapshot for planning: other processes may take
// memory later. Throws mixtrain::Error for the meta device or a device without a backend.
int64_t available_bytes(Device device);

// "1.50 MiB": bytes in the largest binary unit (B, KiB, MiB, GiB, TiB) under 1024 of it, two
// decimals (none for plain bytes).
std::string format_bytes(int64_t bytes);
// "8GiB", "512MiB", "1.5GB", "4096": bytes (KiB/MiB/GiB/TiB binary, kB/MB/GB/TB decimal, B or none
// for bytes; no space, sign or exponent; from 1 byte to 4 EiB, whole for plain bytes). Anything
// else is a mixtrain::Error whose message starts with `what` (the flag or variable it came from).
int64_t parse_bytes(const std::string& text, const std::string& what);

}  // namespace mixtrain::memory
