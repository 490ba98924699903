#include <algorithm>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <set>

#include <nlohmann/json.hpp>

#include "core/json_limits.h"
#include "io/safetensors_internal.h"
#include "mixtrain/base/error.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; this writer and reader copy host bytes as they are");

namespace mixtrain::io {

namespace {

namespace fs = std::filesystem;

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kNames[] = {{kFloat32, "F32"}, {kFloat16, "F16"}, {kBFloat16, "BF16"},        {kFloat64, "F64"},
                                {kInt64, "I64"},   {kInt32, "I32"},   {kBool, "BOOL"},            {kFloat8E4M3FN, "F8_E4M3"},
                                {kFloat8E5M2, "F8_E5M2"}};

std::string le_u64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
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
  MT_ERROR("safetensors: unsupported dtype \"", s, "\" (expected one of F32, F16, BF16, F64, I64, I32, BOOL, F8_E4M3, F8_E5M2)");
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
  std::string text = mixtrain::detail::dump_json(header, -1, "save_safetensors");
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

void save_safetensors(const std::string& path_in, const NamedTensors& tensors, const Metadata& metadata) {
  const fs::path path(path_in);
  MT_CHECK(!path_in.empty(), "save_safetensors: empty path");
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  MT_CHECK(!fs::is_directory(st), "save_safetensors: ", path_in, " is a directory; give a file path");
  MT_CHECK(!fs::exists(st) || fs::is_regular_file(st), "save_safetensors: ", path_in,
           " exists and is not a regular file; refusing to replace it");
  fs::path tmp = path;
  tmp += ".mixtrain-tmp";
  try {
    detail::DurableWriter w(tmp);
    detail::write_safetensors(w, tensors, metadata);
    w.commit();
    fs::rename(tmp, path, ec);
    MT_CHECK(!ec, "save_safetensors: cannot move ", tmp.string(), " to ", path_in, ": ", ec.message());
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  detail::fsync_directory(path.has_parent_path() ? path.parent_path() : fs::path("."));
}

}  // namespace mixtrain::io
