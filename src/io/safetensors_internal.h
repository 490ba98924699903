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

namespace mixtrain::detail {
class InputFile;
}

namespace mixtrain::io::detail {

// One tensor of a parsed header; offsets are absolute (from the start of the file).
struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};
// A checked header: every entry lies inside the file, in data order, with no gap or overlap.
struct SafetensorsIndex {
  std::vector<SafetensorsEntry> entries;
  Metadata metadata;
  uint64_t data_start = 0;  // 8 + the header length
};

// The header length from the first 8 bytes, checked against the file size.
uint64_t safetensors_header_length(const char* first8, uint64_t file_size, const std::string& who);
// Parses and checks the header text (the bytes after the length) of a file of file_size bytes.
SafetensorsIndex parse_safetensors_index(const std::string& header, uint64_t file_size, const std::string& who);
SafetensorsIndex read_safetensors_index(const mixtrain::detail::InputFile& file, const std::string& who);
// Throws unless every byte of a BOOL tensor is 0 or 1.
void check_bool_bytes(const SafetensorsEntry& e, const void* data, const std::string& who);

}  // namespace mixtrain::io::detail
