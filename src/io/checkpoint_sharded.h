#pragma once
// The io side of a sharded checkpoint (distributed::save_sharded_checkpoint runs it, with the
// collectives in between): every rank writes its optimizer shard into the staging directory of
// the save, then rank 0 writes the model and, last, the index (trainer.json with a "sharded"
// entry: the save's id, the world size, the parameters' names and shapes, each rank's pieces, the
// state tensors' dtypes and the index's own CRC-32; each shard's size and CRC-32 among the files),
// and swaps the staging directory in. Each shard's metadata holds its place (ShardPlace).
// Until then the previous checkpoint is complete; a directory without its index is none.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/checkpoint_dir.h"
#include "mixtrain/io/optimizer_state.h"

namespace mixtrain::io::detail {

// Where a shard belongs: the save it is part of (a random id drawn by rank 0 for each save, the
// same in the index), its rank of `world`, and the pieces of the whole state it holds (piece k:
// its "state.<k>.<name>" tensors). Written into the shard's metadata and the index, and compared
// on load, so that a shard of another save or another place is refused.
struct ShardPlace {
  std::string save_id;
  int rank = 0, world = 1;
  std::vector<StatePiece> pieces;
};
// A new save id: 32 hex digits from the system's random source.
std::string new_save_id();
// The pieces as the index and the shard's metadata record them: [[param, offset, numel], ...].
nlohmann::json pieces_json(const std::vector<StatePiece>& pieces);
// The CRC-32 (hex) of a sharded index, over its canonical JSON without its "crc32" key.
std::string index_crc(const nlohmann::json& index);

// Shard `place` (its optimizer's state tensors, "state.<k>.<name>") into the staging directory of
// a sharded save of `dir`, which the writer has created: written under a temporary name, fsynced
// and renamed. Returns its manifest entry {"bytes", "crc32"}.
nlohmann::json write_optimizer_shard(const std::string& dir, const ShardPlace& place, const OptimizerState& shard);

// Rank 0's part of a sharded save.
class ShardedCheckpointWriter {
 public:
  // Checks and stages as save_checkpoint does (CheckpointStaging): before any rank writes.
  ShardedCheckpointWriter(const std::string& dir, const NamedTensors& model, const amp::GradScaler* scaler,
                          const nlohmann::json& extra, const CheckpointParts& parts)
      : staging_(dir, model, scaler, extra, parts) {}
  // Once every rank has written its shard (`shards[r]`: rank r's manifest entry), each checked to
  // be in the staging directory as this rank sees it: the model, the index, the swap. `optimizer`:
  // the whole model's optimizer state_dict (its tensors are in the shards, of `state_dtypes`).
  void commit(const NamedTensors& model, int64_t step, const nlohmann::json& optimizer, const ShardLayout& layout,
              const std::map<std::string, DType>& state_dtypes, const std::vector<nlohmann::json>& shards,
              const std::string& save_id);

 private:
  CheckpointStaging staging_;
};

}  // namespace mixtrain::io::detail
