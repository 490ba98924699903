#pragma once
// Durable file writing (write, fflush, fsync, check every step) and reading, CRC-32 for the
// checkpoint manifest, and the directory swap that makes a checkpoint save atomic.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

namespace mixtrain::io::detail {

// zlib's CRC-32 (reflected polynomial 0xEDB88320), continued from `crc`.
uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);

// Writes a file and makes it durable; every write is checked and counted into size and CRC.
class DurableWriter {
 public:
  explicit DurableWriter(const std::filesystem::path& path);
  ~DurableWriter();  // closes without syncing if commit() was not reached (an error path)
  DurableWriter(const DurableWriter&) = delete;
  DurableWriter& operator=(const DurableWriter&) = delete;

  void write(const void* data, size_t n);
  // fflush + fsync + fclose; throws on any failure.
  void commit();
  uint64_t size() const { return size_; }
  uint32_t crc() const { return crc_; }

 private:
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
  uint64_t size_ = 0;
  uint32_t crc_ = 0;
};

void fsync_directory(const std::filesystem::path& dir);
// Replaces `dir` by `staged` (a sibling directory) so that at every instant either the old or
// the new directory is complete: rename(2) when dir does not exist, renameat2(RENAME_EXCHANGE)
// when the filesystem has it, else two renames through `fallback` (dir -> fallback, staged ->
// dir), which a reader that finds no `dir` falls back to.
void replace_directory(const std::filesystem::path& staged, const std::filesystem::path& dir,
                       const std::filesystem::path& fallback);

}  // namespace mixtrain::io::detail
