// The GEMM tuning table's file: one JSON object,
//   {"format": "mixtrain-gemm-tuning", "version": 1, "device": "...", "library_version": N,
//    "choices": {"<key>": index, ...}}
#include "backends/gemm_tuning_file.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "core/json_limits.h"
#include "mixtrain/base/error.h"
#include "mixtrain/core/file_reader.h"

namespace mixtrain::backends {

namespace {

constexpr const char* kFormat = "mixtrain-gemm-tuning";
constexpr int kVersion = 1;
// A table holds one entry per GEMM shape a program ran; a few thousand at most in practice.
constexpr uint64_t kMaxTableBytes = uint64_t{16} << 20;
constexpr int kMaxCandidateIndex = 1024;

bool printable_key(const std::string& key) {
  if (key.empty() || key.size() > 512) return false;
  for (const char c : key)
    if (c < 0x20 || c > 0x7e) return false;
  return true;
}

}  // namespace

GemmTuningTable read_gemm_tuning(const std::string& path) {
  const std::string who = "GEMM tuning file " + path;
  const nlohmann::json doc =
      detail::parse_json_bounded(read_file(path, "GEMM tuning file", kMaxTableBytes), who);
  MT_CHECK(doc.is_object(), who, ": expected a JSON object");
  const auto field = [&](const char* name) -> const nlohmann::json& {
    MT_CHECK(doc.contains(name), who, ": no \"", name, "\" field");
    return doc.at(name);
  };
  MT_CHECK(field("format").is_string() && field("format").get<std::string>() == kFormat, who,
           ": \"format\" is not \"", kFormat, "\"");
  MT_CHECK(field("version").is_number_integer() && field("version").get<int64_t>() == kVersion, who,
           ": unsupported \"version\" ", detail::json_excerpt(field("version")), " (this build reads ", kVersion, ")");
  MT_CHECK(field("device").is_string(), who, ": \"device\" is not a string");
  MT_CHECK(field("library_version").is_number_integer(), who, ": \"library_version\" is not an integer");
  MT_CHECK(field("choices").is_object(), who, ": \"choices\" is not an object");
  GemmTuningTable table;
  table.device = field("device").get<std::string>();
  table.library_version = field("library_version").get<int64_t>();
  for (const auto& [key, value] : field("choices").items()) {
    MT_CHECK(printable_key(key), who, ": choice key ", detail::json_excerpt(nlohmann::json(key)),
             " is not 1-512 printable characters");
    MT_CHECK(value.is_number_integer() && value.get<int64_t>() >= 0 && value.get<int64_t>() < kMaxCandidateIndex, who,
             ": choice for \"", key, "\" is ", detail::json_excerpt(value), ", expected an index in [0, ",
             kMaxCandidateIndex, ")");
    table.choices[key] = value.get<int>();
  }
  return table;
}

void write_gemm_tuning(const std::string& path, const GemmTuningTable& table) {
  const std::string who = "GEMM tuning file " + path;
  // What the reader would refuse is not written.
  nlohmann::json choices = nlohmann::json::object();
  for (const auto& [key, index] : table.choices) {
    MT_CHECK(printable_key(key), who, ": choice key ", detail::json_excerpt(nlohmann::json(key)),
             " is not 1-512 printable characters; nothing was written");
    MT_CHECK(index >= 0 && index < kMaxCandidateIndex, who, ": choice for \"", key, "\" is ", index,
             ", expected an index in [0, ", kMaxCandidateIndex, "); nothing was written");
    choices[key] = index;
  }
  const nlohmann::json doc = {{"format", kFormat},
                              {"version", kVersion},
                              {"device", table.device},
                              {"library_version", table.library_version},
                              {"choices", choices}};
  // Dumped before the temporary exists: a device name that is not UTF-8 leaves no file behind.
  const std::string text = detail::dump_json(doc, 1, who) + "\n";
  // The temporary's name is unique per process, so two programs saving at once never write
  // into one file; the last rename wins and every reader sees a whole table.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    MT_CHECK(f.good(), "GEMM tuning file ", path, ": cannot write ", tmp);
    f << text;
    f.flush();
    if (!f.good()) {
      std::remove(tmp.c_str());
      MT_ERROR("GEMM tuning file ", path, ": writing ", tmp, " failed");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    MT_ERROR("GEMM tuning file ", path, ": cannot rename ", tmp, " over it");
  }
}

}  // namespace mixtrain::backends
