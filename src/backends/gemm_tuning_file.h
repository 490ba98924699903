#pragma once
// The GEMM algorithm choices of a backend that times its candidates (CUDA's cuBLASLt), kept
// between runs: for each GEMM key, which of the library's heuristic candidates measured fastest.
// A table belongs to one device model and one library version; the CUDA backend uses a table
// only where both match (docs/CUDA.md, "GEMM algorithm choice"). Plain C++, so the format is
// tested on machines without a GPU.
#include <cstdint>
#include <map>
#include <string>

namespace mixtrain::backends {

struct GemmTuningTable {
  std::string device;           // the device model, e.g. "NVIDIA H200"
  int64_t library_version = 0;  // e.g. cublasLtGetVersion()
  std::map<std::string, int> choices;  // GEMM key -> index into the heuristic's candidate list
};

// Reads a table written by write_gemm_tuning. A file that is not one (bad JSON, another format,
// a negative index, a key that is not a string of printable characters) throws mixtrain::Error
// naming the path and the fault; nothing of it is returned.
GemmTuningTable read_gemm_tuning(const std::string& path);

// Writes `table` to `path` atomically: a temporary file beside it, flushed, then renamed over it.
// Throws mixtrain::Error naming the path when it cannot be written.
void write_gemm_tuning(const std::string& path, const GemmTuningTable& table);

}  // namespace mixtrain::backends
