#pragma once
// A data file read in order as its bytes, or, when it starts with the gzip magic, as the inflated
// bytes of its gzip members. The file is opened by the bounded reader (regular files only, size
// known first); a gzip stream is inflated only as far as read() asks, so a reader that knows from
// a header how many bytes to expect never inflates more than that (a small file that inflates to
// gigabytes is caught after the bytes it should hold, not at the end).
#include <zlib.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/input_file.h"

namespace mixtrain::data::detail {

class GzipOrPlainSource {
 public:
  GzipOrPlainSource(const std::string& path, const std::string& who);
  ~GzipOrPlainSource();
  GzipOrPlainSource(const GzipOrPlainSource&) = delete;
  GzipOrPlainSource& operator=(const GzipOrPlainSource&) = delete;

  bool gzip() const { return gzip_; }
  // Plain files: the bytes not yet read (known without reading them).
  uint64_t plain_bytes_left() const { return file_.size() - offset_; }
  // Up to n bytes into dst; fewer only at the end of the data. A corrupt or truncated gzip
  // stream, or bytes after the last member that are not another member, is an Error.
  size_t read(uint8_t* dst, size_t n);

 private:
  bool refill();  // the next compressed chunk into in_; false at the end of the file

  mixtrain::detail::InputFile file_;
  std::string who_;
  bool gzip_ = false;
  uint64_t offset_ = 0;  // file offset of the next byte not yet read from the file
  z_stream z_{};
  bool inflating_ = false, member_done_ = false;
  std::vector<uint8_t> in_;
};

}  // namespace mixtrain::data::detail
