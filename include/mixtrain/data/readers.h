#pragma once
// Readers for common dataset files: IDX (the MNIST format, plain or gzip'd), MNIST-style image
// directories such as Fashion-MNIST (Debian package dataset-fashion-mnist), and numeric CSV.
#include <cstdint>
#include <string>
#include <vector>

#include "mixtrain/data/dataset.h"

namespace mixtrain::data {

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

// The training (60,000) or test (10,000) images of an MNIST-layout directory
// ({train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]): data float32 [N, 784] scaled to [0, 1],
// target int64 [N] in 0..9. Errors name the file; a missing directory or file says which Debian
// package provides Fashion-MNIST.
TensorDataset load_fashion_mnist(const std::string& dir = kFashionMnistDir, bool train = true);

// A numeric CSV: a header row of column names, then one row of numbers per line; one named
// column is the target, every other column a feature (in file order).
struct CsvTable {
  std::vector<std::string> feature_names;
  Tensor features;  // float32 [rows, features]
  Tensor target;    // float32 [rows]
  TensorDataset dataset() const { return TensorDataset(features, target); }
};

// Throws mixtrain::Error naming the file and line for a row with the wrong number of fields, an
// empty or non-numeric or non-finite field; and for a missing file, an empty file, a target
// column that is not in the header (listing the columns), or a header with no feature column.
// Blank lines are skipped; fields may be surrounded by spaces or double quotes; CRLF is fine.
CsvTable read_csv(const std::string& path, const std::string& target_column);

}  // namespace mixtrain::data
