#pragma once
// GEMM algorithm choice for matmul.cpp. cuBLASLt's heuristic ranks several algorithms for a GEMM,
// and its first is not always the fastest on the device at hand. Each GEMM key (shape, dtype,
// layout, epilogue, alignment) is timed once, on first use, over the heuristic's candidates; the
// choice holds for the process and, with MIXTRAIN_GEMM_TUNING_FILE, between runs.
//   MIXTRAIN_GEMM_TUNING=0     the heuristic's first candidate, untimed (the behaviour before tuning)
//   MIXTRAIN_GEMM_TUNING_FILE  a table (backends/gemm_tuning_file.h) read at the first GEMM and
//                              rewritten whenever a new key is timed
#include <cublasLt.h>

#include <functional>
#include <string>
#include <vector>

#include "backends/cuda/context.h"

namespace mixtrain::backends::cuda {

// How many candidates to ask the heuristic for: 1 when tuning is off.
int gemm_candidate_count(DeviceContext& ctx);

// The index into `candidates` to use for `key`: the table's choice when it has a valid one, else
// the fastest under `launch` (one warm-up, then a few timed launches on ctx's stream; a candidate
// whose launch fails is skipped). The heuristic's first is kept unless another is clearly faster,
// so noise between runs rarely changes the choice (and with it the rounding of the results).
int choose_gemm_algorithm(DeviceContext& ctx, const std::string& key,
                          const std::vector<cublasLtMatmulHeuristicResult_t>& candidates,
                          const std::function<cublasStatus_t(const cublasLtMatmulAlgo_t&)>& launch);

// Forgets the settings and the table, so that the next new GEMM key reads the environment and the
// file again (for tests; plans already cached keep their algorithms).
void reset_gemm_tuning();

}  // namespace mixtrain::backends::cuda
