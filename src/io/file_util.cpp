#include "io/file_util.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "mixtrain/base/error.h"

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

namespace mixtrain::io::detail {

namespace fs = std::filesystem;

namespace {
// Slice-by-8 tables: 8 bytes per step, ~1-2 GB/s, so a manifest CRC costs little next to the write.
std::array<std::array<uint32_t, 256>, 8> make_tables() {
  std::array<std::array<uint32_t, 256>, 8> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i)
    for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
  return t;
}
const std::array<std::array<uint32_t, 256>, 8>& tables() {
  static const auto t = make_tables();
  return t;
}
std::string errno_text() { return std::strerror(errno); }
}  // namespace

uint32_t crc32(const void* data, size_t n, uint32_t crc) {
  const auto& t = tables();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  while (n >= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= crc;  // little-endian host (checked in safetensors.cpp)
    crc = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^ t[3][hi & 0xff] ^
          t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xff];
  return ~crc;
}

DurableWriter::DurableWriter(const fs::path& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "wb");
  MT_CHECK(file_ != nullptr, "io: cannot create ", path.string(), ": ", errno_text());
}

DurableWriter::~DurableWriter() {
  if (file_) std::fclose(file_);
}

void DurableWriter::write(const void* data, size_t n) {
  if (n == 0) return;
  MT_CHECK(file_ != nullptr, "io: write to ", path_.string(), " after commit");
  MT_CHECK(std::fwrite(data, 1, n, file_) == n, "io: writing ", path_.string(), " failed: ", errno_text());
  size_ += n;
  crc_ = crc32(data, n, crc_);
}

void DurableWriter::commit() {
  MT_CHECK(std::fflush(file_) == 0, "io: flushing ", path_.string(), " failed: ", errno_text());
  MT_CHECK(::fsync(fileno(file_)) == 0, "io: fsync of ", path_.string(), " failed: ", errno_text());
  std::FILE* f = file_;
  file_ = nullptr;
  MT_CHECK(std::fclose(f) == 0, "io: closing ", path_.string(), " failed: ", errno_text());
}

void fsync_directory(const fs::path& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  MT_CHECK(fd >= 0, "io: cannot open directory ", dir.string(), ": ", errno_text());
  const int rc = ::fsync(fd);
  ::close(fd);
  MT_CHECK(rc == 0, "io: fsync of directory ", dir.string(), " failed: ", errno_text());
}

void replace_directory(const fs::path& staged, const fs::path& dir, const fs::path& fallback) {
  const fs::path parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
  if (!fs::exists(dir)) {
    fs::rename(staged, dir);
    fsync_directory(parent);
    fs::remove_all(fallback);  // a leftover of an interrupted fallback swap, now superseded
    return;
  }
#ifdef SYS_renameat2
  if (::syscall(SYS_renameat2, AT_FDCWD, staged.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
    fsync_directory(parent);
    std::error_code ec;
    fs::remove_all(staged, ec);  // now holds the previous checkpoint; a failure leaves it for the next save
    return;
  }
  MT_CHECK(errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP, "io: swapping ", staged.string(), " and ",
           dir.string(), " failed: ", errno_text());
#endif
  fs::remove_all(fallback);
  fs::rename(dir, fallback);
  fs::rename(staged, dir);
  fsync_directory(parent);
  std::error_code ec;
  fs::remove_all(fallback, ec);  // a failure leaves it for the next save, which removes it
}

}  // namespace mixtrain::io::detail
