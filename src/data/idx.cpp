// IDX files and MNIST-layout directories; gzip'd files are inflated only as far as the header's dims say.
#include "mixtrain/data/readers.h"

#include <sys/stat.h>

#include <algorithm>

#include "data/gzip_source.h"
#include "mixtrain/base/checked_int.h"
#include "mixtrain/base/error.h"
#include "mixtrain/core/factories.h"

namespace mixtrain::data {

namespace {

bool exists(const std::string& path, bool want_dir) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && (want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
}

uint32_t big_endian_u32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

}  // namespace

IdxArray read_idx(const std::string& path) {
  detail::GzipOrPlainSource in(path, "read_idx");
  uint8_t head[4 + 4 * 8];
  const size_t got = in.read(head, 4);
  MT_CHECK(got == 4, "read_idx: ", path, " is too short for an IDX header (", got, " bytes)");
  // Magic: two zero bytes, the element type (0x08 = unsigned byte), the number of dimensions.
  MT_CHECK(head[0] == 0 && head[1] == 0, "read_idx: ", path, " is not an IDX file (bad magic number 0x", std::hex,
           big_endian_u32(head), ")");
  MT_CHECK(head[2] == 0x08, "read_idx: ", path, ": element type 0x", std::hex, int{head[2]},
           " is not supported (only unsigned byte, 0x08)");
  const size_t ndims = head[3];
  MT_CHECK(ndims >= 1 && ndims <= 8, "read_idx: ", path, ": bad number of dimensions ", ndims);
  MT_CHECK(in.read(head + 4, 4 * ndims) == 4 * ndims, "read_idx: ", path, " is truncated inside its header");
  IdxArray out;
  for (size_t i = 0; i < ndims; ++i) out.dims.push_back(big_endian_u32(head + 4 + 4 * i));
  const std::string what = "read_idx: " + path + ": dims " + dims_str(out.dims);
  int64_t count = 1;
  for (const int64_t d : out.dims) {
    count = checked_mul(count, d, what.c_str());
    MT_CHECK(count <= (int64_t{1} << 40), what, " are implausible (more than 2^40 bytes of data)");
  }
  // A plain file's size says at once whether the data fits the dims.
  if (!in.gzip()) {
    const uint64_t have = in.plain_bytes_left();
    MT_CHECK(have >= static_cast<uint64_t>(count), "read_idx: ", path, " is truncated: dims ", dims_str(out.dims),
             " need ", count, " data bytes, found ", have);
    MT_CHECK(have == static_cast<uint64_t>(count), "read_idx: ", path, " has ", have - static_cast<uint64_t>(count),
             " bytes after the ", count, " that dims ", dims_str(out.dims), " describe");
  }
  // Grown as the data arrives: a header is not a reason to allocate its size up front.
  constexpr size_t kChunk = size_t{1} << 20;
  size_t have = 0;
  for (;;) {
    const size_t want = static_cast<size_t>(std::min<int64_t>(count - static_cast<int64_t>(have), kChunk));
    if (want == 0) break;
    out.data.resize(have + want);
    const size_t n = in.read(out.data.data() + have, want);
    have += n;
    if (n < want) break;
  }
  out.data.resize(have);
  MT_CHECK(have == static_cast<size_t>(count), "read_idx: ", path, " is truncated: dims ", dims_str(out.dims), " need ",
           count, " data bytes, found ", have);
  // What follows the data is inflated only up to a small bound: its length when short, else
  // that there is more than the bound.
  constexpr size_t kTrailBound = size_t{1} << 16;
  std::vector<uint8_t> trail(kTrailBound + 1);
  const size_t extra = in.read(trail.data(), trail.size());
  MT_CHECK(extra == 0 || extra > kTrailBound, "read_idx: ", path, " has ", extra, " bytes after the ", count,
           " that dims ", dims_str(out.dims), " describe");
  MT_CHECK(extra == 0, "read_idx: ", path, " holds data past the ", count, count == 1 ? " byte" : " bytes",
           " that dims ", dims_str(out.dims), " describe (more than ", kTrailBound,
           " bytes more; decompression stopped there)");
  return out;
}

TensorDataset load_fashion_mnist(const std::string& dir, bool train) {
  const char* hint = "install the Debian package dataset-fashion-mnist (apt-get install dataset-fashion-mnist)";
  MT_CHECK(exists(dir, true), "fashion-mnist: directory ", dir, " not found; ", hint);
  const std::string prefix = dir + "/" + (train ? "train" : "t10k");
  auto find = [&](const std::string& base) {
    for (const std::string& p : {base + ".gz", base})
      if (exists(p, false)) return p;
    MT_ERROR("fashion-mnist: ", base, ".gz not found; ", hint);
  };
  const std::string images_path = find(prefix + "-images-idx3-ubyte");
  const std::string labels_path = find(prefix + "-labels-idx1-ubyte");
  const IdxArray images = read_idx(images_path);
  const IdxArray labels = read_idx(labels_path);
  MT_CHECK(images.dims.size() == 3 && images.dims[1] == 28 && images.dims[2] == 28, "fashion-mnist: ",
           images_path, " holds dims ", dims_str(images.dims), ", expected [N, 28, 28]");
  MT_CHECK(labels.dims.size() == 1 && labels.dims[0] == images.dims[0], "fashion-mnist: ", labels_path,
           " holds dims ", dims_str(labels.dims), " for ", images.dims[0], " images");
  const int64_t n = images.dims[0];
  std::vector<float> x(images.data.size());
  for (size_t i = 0; i < images.data.size(); ++i) x[i] = static_cast<float>(images.data[i]) / 255.0f;
  std::vector<int64_t> y(labels.data.size());
  for (size_t i = 0; i < labels.data.size(); ++i) {
    MT_CHECK(labels.data[i] < 10, "fashion-mnist: ", labels_path, ": label ", int{labels.data[i]}, " at index ", i,
             " is not a class in 0..9");
    y[i] = labels.data[i];
  }
  MT_CHECK(n > 0, "fashion-mnist: ", images_path, " holds no images");
  return TensorDataset(from_vector(x, {n, 28 * 28}), from_vector(y, {n}));
}

}  // namespace mixtrain::data
