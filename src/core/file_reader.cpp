// read_file and LineReader (mixtrain/core/file_reader.h) over the bounded InputFile.
#include "mixtrain/core/file_reader.h"

#include <algorithm>

#include "core/input_file.h"
#include "mixtrain/base/error.h"

namespace mixtrain {

namespace {
constexpr size_t kChunkBytes = size_t{1} << 20;
}

std::string read_file(const std::string& path, const std::string& who, uint64_t max_bytes) {
  return detail::InputFile(path, who).read_all(max_bytes);
}

LineReader::LineReader(const std::string& path, const std::string& who, size_t max_line_bytes)
    : file_(std::make_unique<detail::InputFile>(path, who)), who_(who), max_line_(max_line_bytes) {}

LineReader::~LineReader() = default;

const std::string& LineReader::path() const { return file_->path(); }
uint64_t LineReader::size() const { return file_->size(); }

bool LineReader::fill() {
  if (offset_ >= file_->size()) return false;
  buffer_.erase(0, pos_);
  pos_ = 0;
  const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunkBytes, file_->size() - offset_));
  const size_t old = buffer_.size();
  buffer_.resize(old + n);
  file_->read_at(offset_, buffer_.data() + old, n);
  offset_ += n;
  return true;
}

bool LineReader::next(std::string& line) {
  size_t scanned = pos_;  // bytes before this index hold no '\n'
  for (;;) {
    const size_t nl = buffer_.find('\n', scanned);
    const size_t end = nl == std::string::npos ? buffer_.size() : nl;
    MT_CHECK(end - pos_ <= max_line_, who_, ": ", path(), ":", line_number_ + 1, ": line longer than ", max_line_,
             " bytes; refusing to read it (is this the right file?)");
    if (nl != std::string::npos) {
      line.assign(buffer_, pos_, nl - pos_);
      pos_ = nl + 1;
      ++line_number_;
      return true;
    }
    scanned = buffer_.size();
    const size_t consumed = pos_;
    if (!fill()) break;
    scanned -= consumed;  // fill() dropped the consumed bytes
  }
  if (pos_ == buffer_.size()) return false;
  line.assign(buffer_, pos_, std::string::npos);
  pos_ = buffer_.size();
  ++line_number_;
  return true;
}

}  // namespace mixtrain
