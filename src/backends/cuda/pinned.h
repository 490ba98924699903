#pragma once
// Pinned host memory on the CUDA side: the cudaHostAlloc backing of memory::pinned_allocator
// (registered before main), and the hold that keeps a pinned source alive while an asynchronous
// copy from it is queued. A copy from pinned memory returns before it ran; were the source's block
// freed then, the caching allocator could hand it to a new tensor whose writes the copy would read.
#include "backends/cuda/context.h"

namespace mixtrain::backends::cuda {

// Keeps `storage` alive until the work queued on ctx.stream so far has run (an event recorded now
// completes). Holds are released by later calls and by mixtrain::cuda::synchronize().
void hold_until_done(const Storage& storage, DeviceContext& ctx);
// Drops the holds whose events completed.
void release_finished_holds();

}  // namespace mixtrain::backends::cuda
