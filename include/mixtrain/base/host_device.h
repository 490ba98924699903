#pragma once
// MT_HOST_DEVICE marks a function that both backends compile: host and device under nvcc, a plain
// host function otherwise. Formulas that must agree bit for bit between the CPU and the CUDA
// backend (random draws, the elementwise math, the optimizer updates) are written once with it.
// Write `MT_HOST_DEVICE inline` for non-template functions defined in headers.
#if defined(__CUDACC__)
#define MT_HOST_DEVICE __host__ __device__
#else
#define MT_HOST_DEVICE
#endif
