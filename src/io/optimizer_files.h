#pragma once
// The optimizer tensors of a checkpoint as load_checkpoint reads them: whole-model tensors
// ("state.<param>.<name>") stored whole in optimizer.safetensors, or in pieces across the shard
// files of a sharded save (trainer.json's "sharded" index says which elements each holds). Every
// file's size and header is checked on construction, each tensor's pieces against the index; the
// CRC of the files a load reads, before anything is applied; then each destination is read from
// the pieces that hold its elements.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/checkpoint_files.h"
#include "mixtrain/io/optimizer_state.h"

namespace mixtrain::io::detail {

// Elements [offset, offset + dst.numel()) of the whole tensor `name`, flattened, go into `dst`.
struct StateDestination {
  std::string name;
  int64_t offset = 0;
  Tensor dst;
};

class OptimizerFiles {
 public:
  // `trainer`: the parsed trainer.json of `dir` (`manifest`); its "files" must name the model
  // file and exactly the optimizer's files.
  OptimizerFiles(const std::string& dir, const nlohmann::json& trainer, const mixtrain::detail::InputFile& manifest);
  ~OptimizerFiles();

  bool sharded() const { return sharded_; }
  // Zero-stride stand-ins of the whole tensors (shapes and dtypes), for the optimizer's checks.
  const NamedTensors& stand_ins() const { return stand_ins_; }
  // Checks the CRC of every file holding some element of `needs` (null: every file), and that
  // their state is finite, second moments (exp_avg_sq, max_exp_avg_sq) >= 0.
  void verify(const std::vector<StatePiece>* needs) const;
  // Fills every destination (verify() has passed for the files it reads).
  void read(const std::vector<StateDestination>& dsts) const;

 private:
  struct Stored {  // a stored tensor: elements [offset, offset + numel) of its whole tensor
    size_t file = 0;
    const SafetensorsEntry* entry = nullptr;
    int64_t offset = 0, numel = 0;
  };
  void index_single();
  void index_shards(const nlohmann::json& index, const std::string& where);
  void check_moments(size_t file) const;
  // Throws unless shard `file`'s metadata says it is this save's shard `rank` with the index's pieces.
  void check_place(const CheckpointTensorFile& file, size_t rank, const nlohmann::json& index) const;
  bool read_whole_in_file_order(const std::vector<StateDestination>& dsts) const;

  bool sharded_ = false;
  std::string save_id_;
  std::vector<std::unique_ptr<CheckpointTensorFile>> files_;
  std::map<std::string, std::vector<Stored>> stored_;  // by whole tensor name, sorted by offset
  std::vector<std::vector<StatePiece>> file_pieces_;   // per file: the pieces it holds (sharded)
  NamedTensors stand_ins_;
};

}  // namespace mixtrain::io::detail
