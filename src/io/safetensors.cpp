#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "io/safetensors_internal.h"
#include "mixtrain/core/error.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; this writer and reader copy host bytes as they are");

namespace mixtrain::io {

namespace {

namespace fs = std::filesystem;

// The reference implementation's limit on the header, which also bounds what a corrupt length
// field can make us allocate.
constexpr uint64_t kMaxHeader = 100u * 1000u * 1000u;

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kNames[] = {{kFloat32, "F32"}, {kFloat16, "F16"}, {kBFloat16, "BF16"}, {kFloat64, "F64"},
                                {kInt64, "I64"},   {kInt32, "I32"},   {kBool, "BOOL"}};

std::string le_u64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

uint64_t read_le_u64(const std::string& s) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[static_cast<size_t>(i)]);
  return v;
}

}  // namespace

const char* safetensors_dtype(DType dtype) {
  for (const auto& n : kNames)
    if (n.dtype == dtype) return n.name;
  MT_ERROR("safetensors: no safetensors name for dtype ", dtype);
}

DType dtype_from_safetensors(const std::string& s) {
  for (const auto& n : kNames)
    if (s == n.name) return n.dtype;
  MT_ERROR("safetensors: unsupported dtype \"", s, "\" (expected one of F32, F16, BF16, F64, I64, I32, BOOL)");
}

namespace detail {

SafetensorsLayout safetensors_layout(const NamedTensors& tensors, const Metadata& metadata) {
  std::set<std::string> names;
  std::vector<std::pair<std::string, Tensor>> sorted;
  for (const auto& [name, t] : tensors) {
    MT_CHECK(!name.empty() && name != "__metadata__", "safetensors: invalid tensor name \"", name, "\"");
    MT_CHECK(names.insert(name).second, "safetensors: tensor name \"", name, "\" appears twice");
    MT_CHECK(t.defined(), "safetensors: tensor \"", name, "\" is undefined");
    safetensors_dtype(t.dtype());  // throws for a dtype the format cannot hold
    Tensor host = t.device().is_cpu() ? t : t.to(Device::cpu());
    sorted.emplace_back(name, host.detach().contiguous());
  }
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    const size_t ea = element_size(a.second.dtype()), eb = element_size(b.second.dtype());
    return ea != eb ? ea > eb : a.first < b.first;
  });
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  SafetensorsLayout out;
  for (const auto& [name, t] : sorted) {
    const uint64_t n = t.nbytes();
    header[name] = {{"dtype", safetensors_dtype(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {offset, offset + n}}};
    offset += n;
    out.ordered.push_back(t);
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  out.header = le_u64(text.size()) + text;
  return out;
}

void write_safetensors(DurableWriter& out, const NamedTensors& tensors, const Metadata& metadata) {
  const SafetensorsLayout layout = safetensors_layout(tensors, metadata);
  out.write(layout.header.data(), layout.header.size());
  for (const Tensor& t : layout.ordered) out.write(t.raw_data(), t.nbytes());
}

}  // namespace detail

std::string serialize_safetensors(const NamedTensors& tensors, const Metadata& metadata) {
  const detail::SafetensorsLayout layout = detail::safetensors_layout(tensors, metadata);
  std::string out = layout.header;
  for (const Tensor& t : layout.ordered) out.append(static_cast<const char*>(t.raw_data()), t.nbytes());
  return out;
}

SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& source) {
  const std::string who = "safetensors " + source;
  MT_CHECK(bytes.size() >= 8, who, ": the file has ", bytes.size(),
           " bytes, too few for the 8-byte header length (truncated or not a safetensors file)");
  const uint64_t n = read_le_u64(bytes);
  MT_CHECK(n <= kMaxHeader, who, ": header length ", n, " exceeds the format's limit of ", kMaxHeader,
           " bytes (corrupt length field or not a safetensors file)");
  MT_CHECK(n <= bytes.size() - 8, who, ": header length ", n, " runs past the end of the file (", bytes.size(),
           " bytes): the file is truncated");
  const std::string text = bytes.substr(8, n);
  MT_CHECK(!text.empty() && text[0] == '{', who, ": the header must be a JSON object starting with '{'");

  // nlohmann keeps the last of duplicate keys; a duplicate tensor name is a corrupt header.
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, [&](int, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
      using E = nlohmann::json::parse_event_t;
      if (ev == E::object_start) keys.emplace_back();
      if (ev == E::object_end && !keys.empty()) keys.pop_back();
      if (ev == E::key && !keys.empty() && !keys.back().insert(parsed.get<std::string>()).second && duplicate.empty())
        duplicate = parsed.get<std::string>();
      return true;
    });
  } catch (const nlohmann::json::exception& e) {
    MT_ERROR(who, ": the header is not valid JSON: ", e.what());
  }
  MT_CHECK(duplicate.empty(), who, ": the header names \"", duplicate, "\" twice");
  MT_CHECK(header.is_object(), who, ": the header must be a JSON object");

  SafetensorsFile out;
  const uint64_t data_size = bytes.size() - 8 - n;
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      MT_CHECK(v.is_object(), who, ": __metadata__ must be an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        MT_CHECK(m.value().is_string(), who, ": __metadata__.", m.key(), " must be a string, got ", m.value().dump());
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string tw = who + ": tensor \"" + name + "\"";
    MT_CHECK(v.is_object() && v.size() == 3 && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"),
             tw, " must be an object with exactly dtype, shape and data_offsets, got ", v.dump());
    MT_CHECK(v["dtype"].is_string(), tw, ": dtype must be a string");
    Entry e;
    e.name = name;
    try {
      e.dtype = dtype_from_safetensors(v["dtype"].get<std::string>());
    } catch (const Error& err) {
      MT_ERROR(tw, ": ", err.what());
    }
    MT_CHECK(v["shape"].is_array(), tw, ": shape must be an array");
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      MT_CHECK(d.is_number_unsigned() || (d.is_number_integer() && d.get<int64_t>() >= 0), tw,
               ": shape must hold non-negative integers, got ", v["shape"].dump());
      const uint64_t s = d.get<uint64_t>();
      MT_CHECK(s == 0 || numel <= data_size / s + 1, tw, ": shape ", v["shape"].dump(), " is larger than the file");
      numel *= s;
      e.shape.push_back(static_cast<int64_t>(s));
    }
    const auto& off = v["data_offsets"];
    MT_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(), tw,
             ": data_offsets must be two non-negative integers, got ", off.dump());
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    MT_CHECK(e.begin <= e.end, tw, ": data_offsets ", off.dump(), " end before they begin");
    MT_CHECK(e.end <= data_size, tw, ": data_offsets ", off.dump(), " run past the data (", data_size,
             " bytes): the file is truncated or the header edited");
    const uint64_t want = numel * element_size(e.dtype);
    MT_CHECK(e.end - e.begin == want, tw, ": ", e.end - e.begin, " bytes of data but dtype ", v["dtype"].get<std::string>(),
             " and shape ", v["shape"].dump(), " need ", want);
    entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  for (const Entry& e : entries) {
    MT_CHECK(e.begin >= expected, who, ": tensor \"", e.name, "\" overlaps the previous tensor's data");
    MT_CHECK(e.begin == expected, who, ": a gap of ", e.begin - expected, " bytes before tensor \"", e.name,
             "\" (the data must be fully indexed)");
    expected = e.end;
  }
  MT_CHECK(expected == data_size, who, ": the data has ", data_size, " bytes but the tensors cover ", expected,
           " (trailing bytes: an edited or concatenated file)");

  const char* data = bytes.data() + 8 + n;
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, TensorOptions(e.dtype));
    if (e.end > e.begin) std::memcpy(t.raw_data(), data + e.begin, e.end - e.begin);
    if (e.dtype == kBool) {
      const auto* b = static_cast<const unsigned char*>(t.raw_data());
      for (uint64_t i = 0; i < e.end - e.begin; ++i)
        MT_CHECK(b[i] <= 1, who, ": tensor \"", e.name, "\" holds a BOOL byte other than 0 or 1 at element ", i);
    }
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

void save_safetensors(const std::string& path_in, const NamedTensors& tensors, const Metadata& metadata) {
  const fs::path path(path_in);
  fs::path tmp = path;
  tmp += ".mixtrain-tmp";
  try {
    detail::DurableWriter w(tmp);
    detail::write_safetensors(w, tensors, metadata);
    w.commit();
    fs::rename(tmp, path);
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  detail::fsync_directory(path.has_parent_path() ? path.parent_path() : fs::path("."));
}

SafetensorsFile load_safetensors(const std::string& path) {
  return parse_safetensors(detail::read_file(path, "safetensors"), path);
}

}  // namespace mixtrain::io
