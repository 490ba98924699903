#pragma once
// The checkpoint directory as save_checkpoint writes it, shared by the single-file and the sharded
// saves (checkpoint.cpp, checkpoint_sharded.cpp): its file names, the staging directory
// "<dir>.mixtrain-tmp" (locked while a save runs), and the steps of a save, from the checks of
// what load_checkpoint would refuse to the swap that makes the new checkpoint appear whole.
#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "mixtrain/io/checkpoint.h"

namespace mixtrain::io::detail {

constexpr const char* kFormat = "mixtrain-checkpoint";
constexpr int64_t kVersion = 1;
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kTrainerFile = "trainer.json";

// Rank `rank`'s optimizer shard of a sharded save over `world` ranks:
// "optimizer-rank-00001-of-00004.safetensors".
std::string shard_file_name(int rank, int world);
// Whether `name` has that form (any rank and world).
bool is_shard_file_name(const std::string& name);

// "ckpt/" and "ckpt" name the same directory.
std::filesystem::path checkpoint_path(const std::string& dir);
std::filesystem::path sibling(const std::filesystem::path& dir, const char* suffix);
inline std::filesystem::path staging_path(const std::filesystem::path& dir) { return sibling(dir, ".mixtrain-tmp"); }
std::string crc_hex(uint32_t crc);

// Throws unless `dir` is absent or a directory holding only a checkpoint's files (a checkpoint
// replaces its directory whole, so anything else would be deleted).
void check_replaceable(const std::filesystem::path& dir, const char* who);
// A "<dir>.mixtrain-tmp" that no live save holds locked was left by a crash: remove it.
void remove_stale_staging(const std::filesystem::path& dir);
// The test hook of checkpoint_internal.h, at `stage`.
void run_save_hook(const std::string& stage);

// Throws, naming `dir` and the tensor, unless the optimizer state to save is finite (a load
// refuses non-finite moments; the previous checkpoint is left as it was).
void check_state_finite(const std::string& dir, const NamedTensors& tensors);

// A durable safetensors file; returns its manifest entry {"bytes", "crc32"}.
nlohmann::json write_tensor_file(const std::filesystem::path& path, const NamedTensors& tensors,
                                 const Metadata& metadata);

// One save: checked and staged on construction, swapped in by commit(). Destroyed before
// commit() (an error), it removes the staging directory, leaving the previous checkpoint as it was.
class CheckpointStaging {
 public:
  // Checks `dir` and, with the loader's rules, the parts that are not tensors (the scaler's, FP8's
  // and `extra`'s state; scaler null: a run without one), then creates and locks the staging
  // directory (flock, so a loader tells a live save from a crash's leftover).
  CheckpointStaging(const std::string& dir, const NamedTensors& model, const amp::GradScaler* scaler,
                    const nlohmann::json& extra, const CheckpointParts& parts);
  ~CheckpointStaging();
  CheckpointStaging(const CheckpointStaging&) = delete;
  CheckpointStaging& operator=(const CheckpointStaging&) = delete;

  const std::filesystem::path& dir() const { return dir_; }
  const std::filesystem::path& staged() const { return staged_; }
  // Writes trainer.json ({format, version, step, files, optimizer, rng, extra, the scaler's and
  // the parts' state} plus the keys of `more`) last, fsyncs the staging directory and swaps it in.
  void commit(int64_t step, const nlohmann::json& files, const nlohmann::json& optimizer, const nlohmann::json& more);

 private:
  std::filesystem::path dir_, staged_;
  int lock_fd_ = -1;
  bool done_ = false;
  nlohmann::json scaler_state_, fp8_state_;
  const nlohmann::json& extra_;
  CheckpointParts parts_;
};

}  // namespace mixtrain::io::detail
