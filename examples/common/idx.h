#pragma once
// IDX files (the MNIST format: a big-endian header, then unsigned bytes), plain or gzip'd, and
// Fashion-MNIST as shipped by the Debian package dataset-fashion-mnist.
#include <cstdint>
#include <string>
#include <vector>

#include "common/dataset.h"

namespace mixtrain::examples {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // prod(dims) bytes, row-major
};

// Reads an IDX file of unsigned bytes; gzip'd files are detected and decompressed. Throws
// mixtrain::Error naming the file for a missing or unreadable file, a bad magic number, an
// element type other than unsigned byte, or a size that disagrees with the header (truncated or
// trailing data).
IdxArray read_idx(const std::string& path);

// The 60,000 training or 10,000 test images of Fashion-MNIST from `dir`: 784 features per row
// scaled to [0, 1], labels 0..9. A missing directory or file says which package to install.
Dataset load_fashion_mnist(const std::string& dir = kFashionMnistDir, bool train = true);

}  // namespace mixtrain::examples
