#pragma once
// Reading input files the way every mixtrain reader does (docs/RELIABILITY.md, "Bounded inputs"):
// only a regular file is opened. A FIFO, a device such as /dev/zero, a socket or a directory is a
// mixtrain::Error naming `who`, the path and what it is, raised before anything could block or
// read without end; the size is known before reading, and nothing past it is read. Programs
// built on mixtrain read their own input files through these too (`mixtrain plot`'s logs).
#include <cstdint>
#include <memory>
#include <string>

namespace mixtrain {

namespace detail {
class InputFile;
}

// The whole file; refused (before reading) when it holds more than max_bytes.
std::string read_file(const std::string& path, const std::string& who, uint64_t max_bytes);

// A file line by line, read in chunks: lines end at '\n' (which is dropped; a '\r' before it is
// kept), the last one may lack it. A line longer than max_line_bytes is an Error naming the file
// and the line, so a file without newlines is never gathered into one string.
class LineReader {
 public:
  static constexpr size_t kDefaultMaxLineBytes = size_t{16} << 20;
  LineReader(const std::string& path, const std::string& who, size_t max_line_bytes = kDefaultMaxLineBytes);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // The next line and true, or false at the end of the file.
  bool next(std::string& line);
  // The 1-based number of the line next() returned last.
  int64_t line_number() const { return line_number_; }
  const std::string& path() const;
  uint64_t size() const;  // the file's size when it was opened

 private:
  bool fill();  // reads the next chunk; false at the end

  std::unique_ptr<detail::InputFile> file_;
  std::string who_;
  size_t max_line_;
  uint64_t offset_ = 0;  // of the first byte not yet in buffer_
  std::string buffer_;
  size_t pos_ = 0;  // first unread byte of buffer_
  int64_t line_number_ = 0;
};

}  // namespace mixtrain
