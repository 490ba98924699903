#pragma once
// Return-code checks for every CUDA runtime, cuBLAS(Lt) and cuDNN call: a failure throws
// mixtrain::Error naming the call and the library's own status name.
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "mixtrain/base/error.h"

#define MT_CUDA_CHECK(expr)                                                                             \
  do {                                                                                                  \
    const cudaError_t mt_err_ = (expr);                                                                 \
    if (mt_err_ != cudaSuccess)                                                                         \
      MT_ERROR("cuda: ", #expr, " failed: ", cudaGetErrorName(mt_err_), " (", cudaGetErrorString(mt_err_), ")"); \
  } while (0)

#define MT_CUBLAS_CHECK(expr)                                                                       \
  do {                                                                                              \
    const cublasStatus_t mt_st_ = (expr);                                                           \
    if (mt_st_ != CUBLAS_STATUS_SUCCESS)                                                            \
      MT_ERROR("cublas: ", #expr, " failed: ", cublasLtGetStatusName(mt_st_), " (",                 \
               cublasLtGetStatusString(mt_st_), ")");                                               \
  } while (0)

#define MT_CUDNN_CHECK(expr)                                                                    \
  do {                                                                                          \
    const cudnnStatus_t mt_st_ = (expr);                                                        \
    if (mt_st_ != CUDNN_STATUS_SUCCESS) MT_ERROR("cudnn: ", #expr, " failed: ", cudnnGetErrorString(mt_st_)); \
  } while (0)
