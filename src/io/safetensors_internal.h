#pragma once
// The safetensors writer in two parts, so a checkpoint can stream tensors into a DurableWriter
// (and its CRC) without building the whole file in memory.
#include <string>
#include <vector>

#include "io/file_util.h"
#include "mixtrain/io/safetensors.h"

namespace mixtrain::io::detail {

struct SafetensorsLayout {
  std::string header;          // the 8-byte length and the padded JSON
  std::vector<Tensor> ordered;  // contiguous CPU tensors in data order
};

SafetensorsLayout safetensors_layout(const NamedTensors& tensors, const Metadata& metadata);
void write_safetensors(DurableWriter& out, const NamedTensors& tensors, const Metadata& metadata);

}  // namespace mixtrain::io::detail
