// The base helpers the reliability rules rest on: checked int64 arithmetic (an overflow is an
// Error naming what was counted) and the bounded file and line reader (regular files only, lines
// split across chunks, a line past the limit refused).
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <limits>

#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
using mt::testing::expect_error;

namespace {
constexpr int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();

std::string temp_file(const std::string& name, const std::string& bytes) {
  const std::string path = ::testing::TempDir() + "checked_io_" + name + "_" + std::to_string(::getpid());
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::vector<std::string> lines_of(const std::string& path, size_t max_line = mt::LineReader::kDefaultMaxLineBytes) {
  mt::LineReader r(path, "test", max_line);
  std::vector<std::string> out;
  for (std::string line; r.next(line);) {
    out.push_back(line);
    EXPECT_EQ(r.line_number(), static_cast<int64_t>(out.size()));
  }
  return out;
}
}  // namespace

TEST(CheckedInt, ResultsInRangeAndErrorsNamingTheCount) {
  EXPECT_EQ(mt::checked_add(kMax - 1, 1, "x"), kMax);
  EXPECT_EQ(mt::checked_sub(kMin + 1, 1, "x"), kMin);
  EXPECT_EQ(mt::checked_mul(int64_t{1} << 31, int64_t{1} << 31, "x"), int64_t{1} << 62);
  EXPECT_EQ(mt::checked_mul(-1, kMax, "x"), -kMax);
  EXPECT_EQ(mt::checked_int64(static_cast<uint64_t>(kMax), "x"), kMax);
  expect_error([] { mt::checked_add(kMax, 1, "bytes live"); }, {"bytes live", "9223372036854775807 + 1", "2^63"});
  expect_error([] { mt::checked_sub(kMin, 1, "delta"); }, {"delta", "-"});
  expect_error([] { mt::checked_mul(int64_t{1} << 32, int64_t{1} << 31, "dims"); }, {"dims", "4294967296 * 2147483648"});
  expect_error([] { mt::checked_mul(-1, kMin, "neg"); }, "neg");
  expect_error([] { mt::checked_int64(uint64_t{1} << 63, "size"); }, {"size", "9223372036854775808", "2^63 - 1"});
}

TEST(FileReader, LinesAcrossChunksAndTheLastLineWithoutNewline) {
  // Lines longer than the 1 MiB read chunk, CRLF kept as '\r', an empty line, no final newline.
  const std::string big(3u << 20, 'a');
  const std::string path = temp_file("lines", "first\r\n\n" + big + "\nlast");
  EXPECT_EQ(lines_of(path), (std::vector<std::string>{"first\r", "", big, "last"}));
  EXPECT_EQ(mt::read_file(path, "test", 1u << 30).size(), 5 + 2 + 1 + big.size() + 1 + 4);
  expect_error([&] { mt::read_file(path, "reading t", 100); }, {"reading t", path, "more than the limit of 100"});
  expect_error([&] { lines_of(path, 1000); }, {"test", path + ":3", "line longer than 1000 bytes"});
  std::remove(path.c_str());
  const std::string empty = temp_file("empty", "");
  EXPECT_TRUE(lines_of(empty).empty());
  std::remove(empty.c_str());
}

TEST(FileReader, OnlyRegularFilesAreOpened) {
  const std::string fifo = ::testing::TempDir() + "checked_io_fifo_" + std::to_string(::getpid());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& p : {fifo, std::string("/dev/zero")}) {
    expect_error([&] { mt::read_file(p, "who", 100); }, {"who", p, "not a regular file"});
    expect_error([&] { mt::LineReader(p, "who"); }, {"who", p, "not a regular file"});
  }
  expect_error([&] { mt::LineReader(::testing::TempDir(), "who"); }, "is a directory");
  expect_error([&] { mt::read_file(fifo + ".absent", "who", 100); }, "No such file");
  std::remove(fifo.c_str());
}
