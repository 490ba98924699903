// The data readers on hostile files: a FIFO or /dev/zero is refused at once (never a block or an
// endless read), a directory is named as one, a gzip'd IDX file is decompressed only as far as
// its header's dims allow, and dims whose product passes 2^63 are refused instead of wrapping.
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>

#include <mixtrain/mixtrain.h>

#include "support/testing.h"

namespace ex = mixtrain::data;
using mixtrain::testing::error_of;
using mixtrain::testing::expect_error;

namespace {

struct TempDir {
  std::string path = ::testing::TempDir() + "mixtrain_reader_limits_" + std::to_string(::getpid());
  TempDir() { ::mkdir(path.c_str(), 0755); }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
};

std::vector<uint8_t> idx_header(const std::vector<uint32_t>& dims) {
  std::vector<uint8_t> out{0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(d >> shift));
  return out;
}

// One gzip member of `bytes`.
std::string gzip_member(const std::vector<uint8_t>& bytes) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 9, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, bytes.size()), '\0');
  z.next_in = const_cast<Bytef*>(bytes.data());
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

void write_file(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

}  // namespace

TEST(ReaderLimits, FifosDevicesAndDirectoriesAreRefusedAtOnce) {
  TempDir tmp;
  const std::string fifo = tmp.path + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Each once blocked forever (a FIFO), read until memory ran out (/dev/zero) or, for read_idx,
  // said "no such file".
  for (const std::string& p : {fifo, std::string("/dev/zero")}) {
    SCOPED_TRACE(p);
    expect_error([&] { ex::read_csv(p, "y"); }, {"read_csv", p, "not a regular file"});
    expect_error([&] { ex::read_idx(p); }, {"read_idx", p, "not a regular file"});
  }
  expect_error([&] { ex::read_csv(tmp.path, "y"); }, {tmp.path, "is a directory"});
  expect_error([&] { ex::read_idx(tmp.path); }, {tmp.path, "is a directory"});
  expect_error([&] { ex::read_idx(tmp.path + "/absent"); }, {"absent", "No such file"});
}

TEST(ReaderLimits, CsvLinesAreBounded) {
  TempDir tmp;
  const std::string path = tmp.path + "/long.csv";
  // 20 MiB without a newline: refused as a line too long rather than gathered whole.
  write_file(path, "a,y\n" + std::string(20u << 20, '1'));
  expect_error([&] { ex::read_csv(path, "y"); }, {path + ":2", "line longer than"});
}

TEST(ReaderLimits, IdxGzipIsInflatedOnlyAsFarAsTheHeaderSays) {
  TempDir tmp;
  const std::string path = tmp.path + "/bomb.idx.gz";
  // A header that says one byte, then 256 MiB of zeros (four 64 MiB gzip members, ~260 KB on
  // disk). The reader used to inflate all of it before comparing; now it stops one byte past
  // what the dims allow.
  std::vector<uint8_t> first = idx_header({1});
  first.resize(first.size() + (64u << 20), 0);
  const std::string zeros = gzip_member(std::vector<uint8_t>(64u << 20, 0));
  write_file(path, gzip_member(first) + zeros + zeros + zeros);
  expect_error([&] { ex::read_idx(path); }, {path, "data past the 1 byte that dims [1] describe"});

  // A plain file with the same header and trailing bytes is told the same way, with the count.
  const std::string plain = tmp.path + "/trailing.idx";
  std::vector<uint8_t> bytes = idx_header({1});
  bytes.resize(bytes.size() + 3, 7);
  write_file(plain, std::string(bytes.begin(), bytes.end()));
  expect_error([&] { ex::read_idx(plain); }, {plain, "has 2 bytes after the 1"});

  // Several members and a valid stream still read as one.
  const std::string split = tmp.path + "/split.idx.gz";
  std::vector<uint8_t> head = idx_header({2, 3});
  write_file(split, gzip_member(head) + gzip_member({1, 2, 3}) + gzip_member({4, 5, 6}));
  const ex::IdxArray a = ex::read_idx(split);
  EXPECT_EQ(a.dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.data, (std::vector<uint8_t>{1, 2, 3, 4, 5, 6}));
  // Bytes after the last member that are not gzip are an error, not ignored.
  write_file(split, gzip_member(head) + gzip_member({1, 2, 3, 4, 5, 6}) + "junk");
  expect_error([&] { ex::read_idx(split); }, {split, "after its gzip stream"});
}

TEST(ReaderLimits, IdxDimsWhoseProductWrapsAreRefused) {
  TempDir tmp;
  const std::string path = tmp.path + "/wrap.idx";
  // 2^20 * 2^20 * 2^24 = 2^64, which wrapped to 0 and matched the empty data.
  const std::vector<uint8_t> h = idx_header({1u << 20, 1u << 20, 1u << 24});
  write_file(path, std::string(h.begin(), h.end()));
  expect_error([&] { ex::read_idx(path); }, {path, "dims [1048576, 1048576, 16777216]"});
  // Dims that multiply to zero with no data stay a valid, empty array.
  const std::vector<uint8_t> z = idx_header({0, 1u << 31, 1u << 31});
  write_file(path, std::string(z.begin(), z.end()));
  EXPECT_TRUE(ex::read_idx(path).data.empty());
}
