#include "data/gzip_source.h"

#include <algorithm>

#include "mixtrain/base/error.h"

namespace mixtrain::data::detail {

namespace {
constexpr size_t kChunkBytes = size_t{1} << 16;
constexpr uint8_t kGzipMagic0 = 0x1f, kGzipMagic1 = 0x8b;
}  // namespace

GzipOrPlainSource::GzipOrPlainSource(const std::string& path, const std::string& who) : file_(path, who), who_(who) {
  if (file_.size() >= 2) {
    uint8_t magic[2];
    file_.read_at(0, magic, 2);
    gzip_ = magic[0] == kGzipMagic0 && magic[1] == kGzipMagic1;
  }
  if (!gzip_) return;
  // 16 + MAX_WBITS: gzip framing, its header and CRC checked by zlib.
  MT_CHECK(inflateInit2(&z_, 16 + MAX_WBITS) == Z_OK, who_, ": zlib could not start inflating ", path);
  inflating_ = true;
}

GzipOrPlainSource::~GzipOrPlainSource() {
  if (inflating_) inflateEnd(&z_);
}

bool GzipOrPlainSource::refill() {
  if (offset_ >= file_.size()) return false;
  const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunkBytes, file_.size() - offset_));
  in_.resize(n);
  file_.read_at(offset_, in_.data(), n);
  offset_ += n;
  z_.next_in = in_.data();
  z_.avail_in = static_cast<uInt>(n);
  return true;
}

size_t GzipOrPlainSource::read(uint8_t* dst, size_t n) {
  if (!gzip_) {
    const size_t take = static_cast<size_t>(std::min<uint64_t>(n, plain_bytes_left()));
    file_.read_at(offset_, dst, take);
    offset_ += take;
    return take;
  }
  size_t got = 0;
  while (got < n) {
    if (z_.avail_in == 0 && !refill()) {
      MT_CHECK(member_done_, who_, ": ", file_.path(), " is corrupt or truncated: its gzip stream ends early");
      break;
    }
    if (member_done_) {  // another member follows, or what follows is not gzip
      MT_CHECK(z_.next_in[0] == kGzipMagic0, who_, ": ", file_.path(), " has bytes after its gzip stream");
      MT_CHECK(inflateReset(&z_) == Z_OK, who_, ": zlib could not inflate ", file_.path());
      member_done_ = false;
    }
    const size_t want = std::min<size_t>(n - got, size_t{1} << 30);
    z_.next_out = dst + got;
    z_.avail_out = static_cast<uInt>(want);
    const int rc = inflate(&z_, Z_NO_FLUSH);
    got += want - z_.avail_out;
    if (rc == Z_STREAM_END) {
      member_done_ = true;
    } else if (rc != Z_OK && !(rc == Z_BUF_ERROR && z_.avail_in == 0)) {
      MT_ERROR(who_, ": ", file_.path(), " is corrupt or truncated: ", z_.msg ? z_.msg : "zlib error " + std::to_string(rc));
    }
  }
  return got;
}

}  // namespace mixtrain::data::detail
