#include "core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "mixtrain/base/error.h"

namespace mixtrain::detail {

namespace {

FileIdentity identity_of(const struct stat& st) {
  FileIdentity id;
  id.device = static_cast<uint64_t>(st.st_dev);
  id.inode = static_cast<uint64_t>(st.st_ino);
  id.size = static_cast<uint64_t>(st.st_size);
  id.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return id;
}

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

FileIdentity identity_of_path(const std::string& path, bool* ok) {
  struct stat st;
  *ok = ::stat(path.c_str(), &st) == 0;
  return *ok ? identity_of(st) : FileIdentity{};
}

InputFile::InputFile(const std::string& path, std::string who) : path_(path), who_(std::move(who)) {
  struct stat st;
  MT_CHECK(::stat(path.c_str(), &st) == 0, who_, ": cannot open ", path, ": ", std::strerror(errno));
  // Checked before open(): opening a FIFO for reading blocks until a writer comes.
  MT_CHECK(S_ISREG(st.st_mode), who_, ": ", path, " is ", kind_of(st.st_mode), ", not a regular file; refusing to read it");
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  MT_CHECK(fd_ >= 0, who_, ": cannot open ", path, ": ", std::strerror(errno));
  // The path may have been replaced between stat() and open(): check what was opened.
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    MT_ERROR(who_, ": ", path, " is not a regular file; refusing to read it");
  }
  identity_ = identity_of(st);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void InputFile::read_at(uint64_t offset, void* dst, size_t n) const {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const size_t chunk = n < (size_t{1} << 30) ? n : (size_t{1} << 30);
    const ssize_t got = ::pread(fd_, p, chunk, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    MT_CHECK(got >= 0, who_, ": reading ", path_, " failed: ", std::strerror(errno));
    MT_CHECK(got > 0, who_, ": ", path_, " ended at byte ", offset, ", before its declared size of ", identity_.size,
             " bytes (the file shrank while it was read: written concurrently?)");
    p += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<size_t>(got);
  }
}

std::string InputFile::read_all(uint64_t max_bytes) const {
  MT_CHECK(identity_.size <= max_bytes, who_, ": ", path_, " has ", identity_.size, " bytes, more than the limit of ",
           max_bytes, " for this kind of file; refusing to read it");
  std::string out(static_cast<size_t>(identity_.size), '\0');
  read_at(0, out.data(), out.size());
  return out;
}

bool InputFile::unchanged_on_disk() const {
  bool ok = false;
  const FileIdentity now = identity_of_path(path_, &ok);
  struct stat st;
  return ok && now == identity_ && ::fstat(fd_, &st) == 0 && identity_of(st) == identity_;
}

}  // namespace mixtrain::detail
