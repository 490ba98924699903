// The safetensors reader: header checks, then tensors read straight from the file (or a buffer)
// into their own storage, so loading never holds the file and its tensors in memory at once.
#include <algorithm>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "core/input_file.h"
#include "core/json_limits.h"
#include "io/safetensors_internal.h"
#include "mixtrain/base/error.h"

namespace mixtrain::io {

namespace {

// The reference implementation's limit on the header, which also bounds what a corrupt length
// field can make us allocate.
constexpr uint64_t kMaxHeader = 100u * 1000u * 1000u;

uint64_t read_le_u64(const char* s) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[i]);
  return v;
}

using mixtrain::detail::json_excerpt;

detail::SafetensorsEntry parse_entry(const std::string& name, const nlohmann::json& v, uint64_t data_size,
                                     const std::string& who) {
  const std::string tw = who + ": tensor \"" + name + "\"";
  MT_CHECK(v.is_object() && v.size() == 3 && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"),
           tw, " must be an object with exactly dtype, shape and data_offsets, got ", json_excerpt(v));
  MT_CHECK(v["dtype"].is_string(), tw, ": dtype must be a string");
  detail::SafetensorsEntry e;
  e.name = name;
  try {
    e.dtype = dtype_from_safetensors(v["dtype"].get<std::string>());
  } catch (const Error& err) {
    MT_ERROR(tw, ": ", err.what());
  }
  const nlohmann::json& shape = v["shape"];
  MT_CHECK(shape.is_array(), tw, ": shape must be an array");
  for (const auto& d : shape) {
    MT_CHECK(d.is_number_unsigned() || (d.is_number_integer() && d.get<int64_t>() >= 0), tw,
             ": shape must hold non-negative integers, got ", json_excerpt(shape));
    const uint64_t s = d.get<uint64_t>();
    MT_CHECK(s <= static_cast<uint64_t>(INT64_MAX), tw, ": shape ", json_excerpt(shape), " has a size past 2^63 - 1");
    e.shape.push_back(static_cast<int64_t>(s));
  }
  size_t want = 0;
  try {
    want = checked_nbytes(e.shape, element_size(e.dtype), "shape");
  } catch (const Error& err) {
    MT_ERROR(tw, ": ", err.what());
  }
  const auto& off = v["data_offsets"];
  MT_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(), tw,
           ": data_offsets must be two non-negative integers, got ", json_excerpt(off));
  const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
  MT_CHECK(begin <= end, tw, ": data_offsets ", json_excerpt(off), " end before they begin");
  MT_CHECK(end <= data_size, tw, ": data_offsets ", json_excerpt(off), " run past the data (", data_size,
           " bytes): the file is truncated or the header edited");
  MT_CHECK(end - begin == want, tw, ": ", end - begin, " bytes of data but dtype ", v["dtype"].get<std::string>(),
           " and shape ", shape_str(e.shape), " need ", want);
  e.begin = begin;
  e.end = end;
  return e;
}

}  // namespace

namespace detail {

uint64_t safetensors_header_length(const char* first8, uint64_t file_size, const std::string& who) {
  MT_CHECK(file_size >= 8, who, ": the file has ", file_size,
           " bytes, too few for the 8-byte header length (truncated or not a safetensors file)");
  const uint64_t n = read_le_u64(first8);
  MT_CHECK(n <= kMaxHeader, who, ": header length ", n, " exceeds the format's limit of ", kMaxHeader,
           " bytes (corrupt length field or not a safetensors file)");
  MT_CHECK(n <= file_size - 8, who, ": header length ", n, " runs past the end of the file (", file_size,
           " bytes): the file is truncated");
  return n;
}

SafetensorsIndex parse_safetensors_index(const std::string& text, uint64_t file_size, const std::string& who) {
  MT_CHECK(!text.empty() && text[0] == '{', who, ": the header must be a JSON object starting with '{'");
  // The JSON parser stops at a NUL as at the end of input; the format pads with spaces only.
  const size_t nul = text.find('\0');
  MT_CHECK(nul == std::string::npos, who, ": the header holds a NUL byte at offset ", nul,
           " (the format pads the header with spaces; a corrupt or edited file)");

  // nlohmann keeps the last of duplicate keys; a duplicate tensor name is a corrupt header.
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  const nlohmann::json header = mixtrain::detail::parse_json_bounded(
      text, who + ": header", [&](int, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
        using E = nlohmann::json::parse_event_t;
        if (ev == E::object_start) keys.emplace_back();
        if (ev == E::object_end && !keys.empty()) keys.pop_back();
        if (ev == E::key && !keys.empty() && !keys.back().insert(parsed.get<std::string>()).second &&
            duplicate.empty())
          duplicate = parsed.get<std::string>();
        return true;
      });
  MT_CHECK(duplicate.empty(), who, ": the header names \"", duplicate, "\" twice");
  MT_CHECK(header.is_object(), who, ": the header must be a JSON object");

  SafetensorsIndex out;
  out.data_start = 8 + text.size();
  const uint64_t data_size = file_size - out.data_start;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      MT_CHECK(v.is_object(), who, ": __metadata__ must be an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        MT_CHECK(m.value().is_string(), who, ": __metadata__.", m.key(), " must be a string, got ",
                 json_excerpt(m.value()));
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    MT_CHECK(!name.empty(), who, ": a tensor has an empty name (the writer refuses those)");
    out.entries.push_back(parse_entry(name, v, data_size, who));
  }
  auto& entries = out.entries;
  std::sort(entries.begin(), entries.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  for (const SafetensorsEntry& e : entries) {
    MT_CHECK(e.begin >= expected, who, ": tensor \"", e.name, "\" overlaps the previous tensor's data");
    MT_CHECK(e.begin == expected, who, ": a gap of ", e.begin - expected, " bytes before tensor \"", e.name,
             "\" (the data must be fully indexed)");
    expected = e.end;
  }
  MT_CHECK(expected == data_size, who, ": the data has ", data_size, " bytes but the tensors cover ", expected,
           " (trailing bytes: an edited or concatenated file)");
  for (SafetensorsEntry& e : entries) {
    e.begin += out.data_start;
    e.end += out.data_start;
  }
  return out;
}

SafetensorsIndex read_safetensors_index(const mixtrain::detail::InputFile& file, const std::string& who) {
  char first8[8] = {};
  if (file.size() >= 8) file.read_at(0, first8, 8);
  const uint64_t n = safetensors_header_length(first8, file.size(), who);
  std::string text(static_cast<size_t>(n), '\0');
  file.read_at(8, text.data(), text.size());
  return parse_safetensors_index(text, file.size(), who);
}

void check_bool_bytes(const SafetensorsEntry& e, const void* data, const std::string& who) {
  if (e.dtype != kBool) return;
  const auto* b = static_cast<const unsigned char*>(data);
  for (uint64_t i = 0; i < e.end - e.begin; ++i)
    MT_CHECK(b[i] <= 1, who, ": tensor \"", e.name, "\" holds a BOOL byte other than 0 or 1 at element ", i);
}

}  // namespace detail

SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& source) {
  const std::string who = "safetensors " + source;
  const uint64_t n = detail::safetensors_header_length(bytes.data(), bytes.size(), who);
  const detail::SafetensorsIndex index = detail::parse_safetensors_index(bytes.substr(8, n), bytes.size(), who);
  SafetensorsFile out;
  out.metadata = index.metadata;
  for (const detail::SafetensorsEntry& e : index.entries) {
    detail::check_bool_bytes(e, bytes.data() + e.begin, who);
    Tensor t = Tensor::empty(e.shape, TensorOptions(e.dtype));
    if (e.end > e.begin) std::memcpy(t.raw_data(), bytes.data() + e.begin, e.end - e.begin);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

SafetensorsFile load_safetensors(const std::string& path) {
  const std::string who = "safetensors " + path;
  const mixtrain::detail::InputFile file(path, "load_safetensors");
  const detail::SafetensorsIndex index = detail::read_safetensors_index(file, who);
  SafetensorsFile out;
  out.metadata = index.metadata;
  for (const detail::SafetensorsEntry& e : index.entries) {
    Tensor t = Tensor::empty(e.shape, TensorOptions(e.dtype));
    file.read_at(e.begin, t.raw_data(), e.end - e.begin);
    detail::check_bool_bytes(e, t.raw_data(), who);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

}  // namespace mixtrain::io
