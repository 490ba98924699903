#pragma once
// Bounded reading of input files: only regular files are opened (never a FIFO, a device such as
// /dev/zero, or a directory), sizes are known before anything is read, and reads land where the
// caller says (so a loader can read a tensor straight into its destination). The public face of
// this is mixtrain/core/file_reader.h (read_file, LineReader).
#include <sys/types.h>

#include <cstdint>
#include <string>

namespace mixtrain::detail {

// What identifies one version of a file: a save that replaces the file changes at least one.
struct FileIdentity {
  uint64_t device = 0, inode = 0, size = 0;
  int64_t mtime_ns = 0;
  bool operator==(const FileIdentity& o) const {
    return device == o.device && inode == o.inode && size == o.size && mtime_ns == o.mtime_ns;
  }
  bool operator!=(const FileIdentity& o) const { return !(*this == o); }
};

// The identity of what `path` names now; `ok` is false when it cannot be stat'ed.
FileIdentity identity_of_path(const std::string& path, bool* ok);

class InputFile {
 public:
  // Throws mixtrain::Error naming `who` and the path unless path is a readable regular file.
  InputFile(const std::string& path, std::string who);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  uint64_t size() const { return identity_.size; }
  const FileIdentity& identity() const { return identity_; }
  const std::string& path() const { return path_; }
  // Reads exactly n bytes at `offset`; a short read (the file shrank) is an Error.
  void read_at(uint64_t offset, void* dst, size_t n) const;
  // The whole file, refused (before reading) when it is larger than max_bytes.
  std::string read_all(uint64_t max_bytes) const;
  // Whether `path` still names the file that was opened, unchanged.
  bool unchanged_on_disk() const;

 private:
  std::string path_;
  std::string who_;
  int fd_ = -1;
  FileIdentity identity_;
};

// Limit for JSON documents and other small text inputs (policy tables, trainer.json).
constexpr uint64_t kMaxTextFileBytes = 256ull << 20;

}  // namespace mixtrain::detail
