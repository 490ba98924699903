// libFuzzer target: an IDX file -> data::read_idx. The first byte picks the file's form: the rest
// as it is, or gzip'd (so the fuzzer reaches the inflating path with valid streams), or gzip'd
// with its last bytes cut. Only mixtrain::Error may escape; an accepted array holds exactly the
// bytes its dims describe.
#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_files.h"
#include "mixtrain/mixtrain.h"

namespace mt = mixtrain;

namespace {
std::string gzip(const std::string& bytes) {
  z_stream z{};
  if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) __builtin_trap();
  std::string out(deflateBound(&z, bytes.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) __builtin_trap();
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 3 >= 1) bytes = gzip(bytes);
  if (data[0] % 3 == 2) bytes.resize(bytes.size() - std::min<size_t>(bytes.size(), data[0] / 3 % 16 + 1));
  const std::string path = mt::fuzz::input_file("array.idx", bytes);
  try {
    const mt::data::IdxArray a = mt::data::read_idx(path);
    int64_t count = 1;
    for (int64_t d : a.dims) count *= d;
    if (a.dims.empty() || static_cast<int64_t>(a.data.size()) != count) __builtin_trap();
  } catch (const mt::Error&) {
  }
  return 0;
}
