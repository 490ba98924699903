#pragma once
// The io side of a sharded checkpoint (distributed::save_sharded_checkpoint runs it, with the
// collectives in between): every rank writes its optimizer shard into the staging directory of
// the save, then rank 0 writes the model and, last, the index (trainer.json with a "sharded"
// entry: the world size, the parameters' names and shapes, each rank's pieces, the state tensors'
// dtypes, and each shard's size and CRC-32 among the files), and swaps the staging directory in.
// Until then the previous checkpoint is complete; a directory without its index is none.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/checkpoint_dir.h"
#include "mixtrain/io/optimizer_state.h"

namespace mixtrain::io::detail {

// Rank `rank`'s shard (its optimizer's state tensors, "state.<k>.<name>") into the staging
// directory of a sharded save of `dir`, which the writer has created: written under a temporary
// name, fsynced and renamed. Returns its manifest entry {"bytes", "crc32"}.
nlohmann::json write_optimizer_shard(const std::string& dir, int rank, int world, const OptimizerState& shard);

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
              const std::map<std::string, DType>& state_dtypes, const std::vector<nlohmann::json>& shards);

 private:
  CheckpointStaging staging_;
};

}  // namespace mixtrain::io::detail
