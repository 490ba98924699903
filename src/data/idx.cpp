// IDX files and MNIST-layout directories, read through zlib (gzip'd or plain alike).
#include "mixtrain/data/readers.h"

#include <sys/stat.h>
#include <zlib.h>

#include <memory>

#include "mixtrain/core/error.h"
#include "mixtrain/core/factories.h"

namespace mixtrain::data {

namespace {

bool exists(const std::string& path, bool want_dir) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && (want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
}

// gzerror prefixes its message with the path, which our messages already name.
std::string gz_message(gzFile f, const std::string& path) {
  int errnum = 0;
  std::string msg = gzerror(f, &errnum);
  if (msg.rfind(path + ": ", 0) == 0) msg = msg.substr(path.size() + 2);
  return msg;
}

// zlib's gz* functions read gzip'd and plain files alike; a truncated gzip stream is reported
// by gzerror rather than as a short read, so both are checked.
std::vector<uint8_t> read_all(const std::string& path) {
  MT_CHECK(exists(path, false), "read_idx: cannot open ", path, ": no such file");
  std::unique_ptr<gzFile_s, int (*)(gzFile)> f(gzopen(path.c_str(), "rb"), gzclose);
  MT_CHECK(f != nullptr, "read_idx: cannot open ", path);
  std::vector<uint8_t> out;
  uint8_t chunk[1 << 16];
  for (;;) {
    const int n = gzread(f.get(), chunk, sizeof(chunk));
    if (n < 0) MT_ERROR("read_idx: ", path, " is corrupt or truncated: ", gz_message(f.get(), path));
    if (n == 0) break;
    out.insert(out.end(), chunk, chunk + n);
  }
  int errnum = 0;
  gzerror(f.get(), &errnum);
  MT_CHECK(errnum == Z_OK || errnum == Z_STREAM_END, "read_idx: ", path, " is corrupt or truncated: ",
           gz_message(f.get(), path));
  return out;
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
  std::vector<uint8_t> bytes = read_all(path);
  MT_CHECK(bytes.size() >= 4, "read_idx: ", path, " is too short for an IDX header (", bytes.size(), " bytes)");
  // Magic: two zero bytes, the element type (0x08 = unsigned byte), the number of dimensions.
  MT_CHECK(bytes[0] == 0 && bytes[1] == 0, "read_idx: ", path, " is not an IDX file (bad magic number 0x",
           std::hex, big_endian_u32(bytes.data()), ")");
  MT_CHECK(bytes[2] == 0x08, "read_idx: ", path, ": element type 0x", std::hex, int{bytes[2]},
           " is not supported (only unsigned byte, 0x08)");
  const size_t ndims = bytes[3];
  MT_CHECK(ndims >= 1 && ndims <= 8, "read_idx: ", path, ": bad number of dimensions ", ndims);
  const size_t header = 4 + 4 * ndims;
  MT_CHECK(bytes.size() >= header, "read_idx: ", path, " is truncated inside its header");
  IdxArray out;
  uint64_t count = 1;
  for (size_t i = 0; i < ndims; ++i) {
    const uint32_t d = big_endian_u32(bytes.data() + 4 + 4 * i);
    out.dims.push_back(d);
    count *= d;
    MT_CHECK(count <= (uint64_t{1} << 40), "read_idx: ", path, ": implausible dims ", dims_str(out.dims));
  }
  const uint64_t have = bytes.size() - header;
  MT_CHECK(have >= count, "read_idx: ", path, " is truncated: dims ", dims_str(out.dims), " need ", count,
           " data bytes, found ", have);
  MT_CHECK(have == count, "read_idx: ", path, " has ", have - count, " bytes after the ", count,
           " that dims ", dims_str(out.dims), " describe");
  out.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
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
