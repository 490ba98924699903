#pragma once
// safetensors files (the format of Hugging Face and PyTorch's safetensors package):
//   8 bytes   N, the header length, unsigned little-endian
//   N bytes   JSON header: {"<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
//             ..., "__metadata__": {"<key>": "<string value>"}}, padded with spaces to a multiple
//             of 8 so the data starts 8-byte aligned
//   the data  tensors back to back, row-major, little-endian; offsets relative to the data start.
// The writer orders tensors by element size (largest first) then name, as the reference
// implementation does, so each tensor starts aligned to its element size. dtypes: F32, F16,
// BF16, F64, I64, I32, BOOL.
//
// The reader checks everything before building tensors: header length within the file, valid
// JSON without duplicate names, known dtypes, shapes, offsets inside the data, no overlaps or
// gaps, and byte counts that match dtype and shape. A truncated or edited file is an Error.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "mixtrain/core/tensor.h"

namespace mixtrain::io {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using Metadata = std::map<std::string, std::string>;

struct SafetensorsFile {
  NamedTensors tensors;  // in file order (by data offset)
  Metadata metadata;
};

// The whole file as bytes.
std::string serialize_safetensors(const NamedTensors& tensors, const Metadata& metadata = {});
// `source` names the data in error messages (a path).
SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& source = "safetensors data");

// Atomic: written to a temporary file next to `path`, flushed, fsynced and renamed over it.
void save_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata = {});
SafetensorsFile load_safetensors(const std::string& path);

const char* safetensors_dtype(DType dtype);          // "F32", ...
DType dtype_from_safetensors(const std::string& s);  // throws for an unknown name

}  // namespace mixtrain::io
