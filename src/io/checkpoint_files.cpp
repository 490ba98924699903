#include "io/checkpoint_files.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/json_fields.h"
#include "io/file_util.h"
#include "mixtrain/base/error.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/base/half.h"

namespace mixtrain::io::detail {

namespace {
std::string crc_text(uint32_t crc) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", crc);
  return buf;
}
constexpr size_t kChunk = size_t{1} << 20;
}  // namespace

CheckpointTensorFile::CheckpointTensorFile(const std::string& dir, const char* name, const nlohmann::json& files,
                                           const mixtrain::detail::InputFile& manifest)
    : where_(manifest.path() + " files"), file_(dir + "/" + name, "load_checkpoint"), manifest_(manifest) {
  json_io::check_object_keys(json_io::json_field(files, name, where_), {"bytes", "crc32"}, {},
                             json_io::json_path(where_, name));
  const nlohmann::json& entry = files[name];
  const uint64_t bytes = json_io::json_unsigned(entry, "bytes", json_io::json_path(where_, name));
  crc_ = json_io::json_string(entry, "crc32", json_io::json_path(where_, name));
  if (file_.size() != bytes)
    fail_crc("has " + std::to_string(file_.size()) + " bytes but the manifest says " + std::to_string(bytes));
  index_ = read_safetensors_index(file_, "checkpoint " + file_.path());
}

void CheckpointTensorFile::fail_crc(const std::string& what) const {
  const bool replaced = !file_.unchanged_on_disk() || !manifest_.unchanged_on_disk();
  MT_CHECK(!replaced, "checkpoint: ", file_.path(), " ", what, ": the checkpoint was replaced while it was being ",
           "loaded (a save running at the same time); load it again once the save has finished");
  MT_ERROR("checkpoint: ", file_.path(), " ", what, " (the file was truncated, edited or corrupted after the ",
           "checkpoint was written, or written by another process while this one saved)");
}

std::string CheckpointTensorFile::header_bytes() const {
  std::string h(static_cast<size_t>(index_.data_start), '\0');
  file_.read_at(0, h.data(), h.size());
  return h;
}

void CheckpointTensorFile::verify() const {
  std::vector<char> buf(kChunk);
  uint32_t crc = 0;
  for (uint64_t off = 0; off < file_.size();) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, file_.size() - off));
    file_.read_at(off, buf.data(), n);
    crc = crc32(buf.data(), n, crc);
    off += n;
  }
  if (crc_text(crc) != crc_) fail_crc("does not match its CRC-32 in the manifest");
  for (const SafetensorsEntry& e : index_.entries) {
    if (e.dtype != kBool) continue;
    std::string bytes(static_cast<size_t>(e.end - e.begin), '\0');
    file_.read_at(e.begin, bytes.data(), bytes.size());
    check_bool_bytes(e, bytes.data(), "checkpoint " + file_.path());
  }
}

namespace {
// Element i of a little-endian floating buffer, as a double.
double element_at(DType d, const char* p, size_t i) {
  if (d == kFloat64) {
    double v;
    std::memcpy(&v, p + i * 8, 8);
    return v;
  }
  if (d == kFloat32) {
    float v;
    std::memcpy(&v, p + i * 4, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, p + i * 2, 2);
  return d == kBFloat16 ? bf16_bits_to_float(h) : half_bits_to_float(h);
}
}  // namespace

void CheckpointTensorFile::check_values(const SafetensorsEntry& e, bool non_negative, const std::string& what) const {
  if (!(e.dtype == kFloat64 || e.dtype == kFloat32 || e.dtype == kFloat16 || e.dtype == kBFloat16)) return;
  const size_t esize = element_size(e.dtype);
  std::vector<char> buf(kChunk / esize * esize);
  for (uint64_t off = e.begin; off < e.end;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), e.end - off));
    file_.read_at(off, buf.data(), n);
    for (size_t i = 0; i < n / esize; ++i) {
      const double v = element_at(e.dtype, buf.data(), i);
      if (std::isfinite(v) && (!non_negative || v >= 0.0)) continue;
      MT_ERROR("load_checkpoint: ", file_.path(), ": tensor \"", e.name, "\" (", what, ") holds ", v,
               " at element ", (off - e.begin) / esize + i, "; ", non_negative ? "it must be finite and >= 0" : "it must be finite",
               " (the optimizer state was corrupted, or saved by a run that diverged); nothing was loaded");
    }
    off += n;
  }
}

void CheckpointTensorFile::read_into(const std::vector<Tensor>& dst) const {
  MT_CHECK(dst.size() == index_.entries.size(), "checkpoint: internal error: ", dst.size(), " destinations for ",
           index_.entries.size(), " tensors");
  const std::string h = header_bytes();
  uint32_t crc = crc32(h.data(), h.size());
  NoGradGuard no_grad;
  for (size_t i = 0; i < dst.size(); ++i) {
    const SafetensorsEntry& e = index_.entries[i];
    const Tensor& d = dst[i];
    const size_t n = static_cast<size_t>(e.end - e.begin);
    if (d.device().is_cpu() && d.is_contiguous()) {
      file_.read_at(e.begin, d.raw_data(), n);  // straight into the model
      crc = crc32(d.raw_data(), n, crc);
    } else {
      Tensor t = Tensor::empty(e.shape, TensorOptions(e.dtype));
      file_.read_at(e.begin, t.raw_data(), n);
      crc = crc32(t.raw_data(), n, crc);
      Tensor(d).copy_(t);
    }
  }
  // verify() passed on this same open file: a difference now means it was rewritten in place.
  MT_CHECK(crc_text(crc) == crc_, "checkpoint: ", file_.path(), " changed while it was being read (rewritten in ",
           "place by another process); the model holds a partial load: load a checkpoint again");
}

Tensor CheckpointTensorFile::read_entry(const SafetensorsEntry& e) const {
  NoGradGuard no_grad;
  Tensor t = Tensor::empty(e.shape, TensorOptions(e.dtype));
  file_.read_at(e.begin, t.raw_data(), static_cast<size_t>(e.end - e.begin));
  return t;
}

}  // namespace mixtrain::io::detail
