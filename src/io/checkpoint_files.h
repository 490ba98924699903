#pragma once
// The safetensors files of a checkpoint as load_checkpoint reads them: checked against the
// manifest (size, CRC-32) before anything is applied, then each tensor read straight into its
// destination (the model's parameters, the optimizer's state): no second copy in memory.
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/input_file.h"
#include "io/safetensors_internal.h"

namespace mixtrain::io::detail {

class CheckpointTensorFile {
 public:
  // Opens dir/name and checks its size against the manifest entry files[name] and its header.
  // `manifest` is the opened trainer.json, used to tell a concurrent save from corruption.
  CheckpointTensorFile(const std::string& dir, const char* name, const nlohmann::json& files,
                       const mixtrain::detail::InputFile& manifest);

  const SafetensorsIndex& index() const { return index_; }
  const std::string& path() const { return file_.path(); }
  // Reads the whole file once to check its CRC-32 (and the BOOL tensors' bytes).
  void verify() const;
  // Reads floating tensor `e` (after verify()) and throws, naming this file, `what` and the first
  // bad element, unless every value is finite and, with `non_negative`, >= 0.
  void check_values(const SafetensorsEntry& e, bool non_negative, const std::string& what) const;
  // Reads each tensor into dst[i] (same order as index().entries; shapes and dtypes checked by
  // the caller), the CRC checked again on the way.
  void read_into(const std::vector<Tensor>& dst) const;
  // One tensor into a new CPU tensor (its bytes as stored; verify() has checked the file's CRC).
  Tensor read_entry(const SafetensorsEntry& e) const;
  // n bytes of a tensor from byte `offset` of its data (bounds checked by the caller).
  void read_bytes(const SafetensorsEntry& e, uint64_t offset, size_t n, void* dst) const {
    file_.read_at(e.begin + offset, dst, n);
  }

 private:
  [[noreturn]] void fail_crc(const std::string& what) const;
  std::string header_bytes() const;
  std::string where_;
  mixtrain::detail::InputFile file_;
  const mixtrain::detail::InputFile& manifest_;
  SafetensorsIndex index_;
  std::string crc_;
};

}  // namespace mixtrain::io::detail
