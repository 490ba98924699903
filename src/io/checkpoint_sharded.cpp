#include "io/checkpoint_sharded.h"

#include <cstdio>
#include <filesystem>
#include <random>

#include "io/file_util.h"
#include "mixtrain/base/error.h"
#include "mixtrain/io/safetensors.h"

namespace mixtrain::io::detail {

namespace fs = std::filesystem;

std::string new_save_id() {
  std::random_device source;
  std::string id;
  for (int i = 0; i < 4; ++i) {
    char part[9];
    std::snprintf(part, sizeof part, "%08x", static_cast<unsigned>(source()));
    id += part;
  }
  return id;
}

nlohmann::json pieces_json(const std::vector<StatePiece>& pieces) {
  nlohmann::json out = nlohmann::json::array();
  for (const StatePiece& p : pieces) out.push_back({p.param, p.offset, p.numel});
  return out;
}

std::string index_crc(const nlohmann::json& index) {
  nlohmann::json rest = index;
  rest.erase("crc32");
  const std::string text = rest.dump();
  return crc_hex(crc32(text.data(), text.size()));
}

nlohmann::json write_optimizer_shard(const std::string& dir, const ShardPlace& place, const OptimizerState& shard) {
  const int rank = place.rank, world = place.world;
  MT_CHECK(world >= 1 && rank >= 0 && rank < world, "save_checkpoint: rank ", rank, " is not in a world of ", world);
  const fs::path staged = staging_path(checkpoint_path(dir));
  MT_CHECK(fs::is_directory(staged), "save_checkpoint: rank ", rank, " does not see the staging directory ",
           staged.string(), " that rank 0 created: a sharded checkpoint needs a directory every rank shares (one ",
           "host, or a shared filesystem); save the gathered checkpoint instead");
  check_state_finite(dir, shard.tensors);
  const std::string name = shard_file_name(rank, world);
  fs::path part = staged / name;
  part += ".part";
  const nlohmann::json entry = write_tensor_file(part, shard.tensors,
                                                 {{"format", "pt"},
                                                  {"optimizer", shard.type},
                                                  {"rank", std::to_string(rank)},
                                                  {"world_size", std::to_string(world)},
                                                  {"save_id", place.save_id},
                                                  {"pieces", pieces_json(place.pieces).dump()}});
  fs::rename(part, staged / name);
  run_save_hook(name);
  return entry;
}

void ShardedCheckpointWriter::commit(const NamedTensors& model, int64_t step, const nlohmann::json& optimizer,
                                     const ShardLayout& layout, const std::map<std::string, DType>& state_dtypes,
                                     const std::vector<nlohmann::json>& shards, const std::string& save_id) {
  MT_CHECK(step >= 0, "save_checkpoint: step must be >= 0, got ", step);
  const int world = static_cast<int>(layout.ranks.size());
  MT_CHECK(
      world >= 1 && shards.size() == layout.ranks.size() && layout.param_names.size() == layout.param_shapes.size(),
      "save_checkpoint: internal error: ", shards.size(), " shards for a layout of ", world, " ranks");
  nlohmann::json files = nlohmann::json::object();
  nlohmann::json index_shards = nlohmann::json::array();
  for (int r = 0; r < world; ++r) {
    const std::string name = shard_file_name(r, world);
    const fs::path path = staging_.staged() / name;
    std::error_code ec;
    const uintmax_t bytes = fs::file_size(path, ec);
    const nlohmann::json& said = shards[static_cast<size_t>(r)];
    MT_CHECK(!ec && bytes == said.at("bytes").get<uint64_t>(), "save_checkpoint: rank ", r, "'s shard ", path.string(),
             " (", said.at("bytes").get<uint64_t>(), " bytes written) is ",
             ec ? "missing" : "of " + std::to_string(bytes) + " bytes", " where rank 0 looks: a sharded checkpoint ",
             "needs a directory every rank shares (one host, or a shared filesystem); save the gathered checkpoint ",
             "instead");
    files[name] = said;
    index_shards.push_back({{"file", name}, {"pieces", pieces_json(layout.ranks[static_cast<size_t>(r)])}});
  }
  files[kModelFile] = write_tensor_file(staging_.staged() / kModelFile, model, {{"format", "pt"}});
  run_save_hook(kModelFile);
  nlohmann::json params = nlohmann::json::array();
  for (size_t i = 0; i < layout.param_names.size(); ++i)
    params.push_back({{"name", layout.param_names[i]}, {"shape", layout.param_shapes[i]}});
  nlohmann::json dtypes = nlohmann::json::object();
  for (const auto& [n, d] : state_dtypes) dtypes[n] = safetensors_dtype(d);
  nlohmann::json index = {{"save_id", save_id},     {"world_size", world},     {"params", params},
                          {"state_dtypes", dtypes}, {"shards", index_shards}};
  index["crc32"] = index_crc(index);
  staging_.commit(step, files, optimizer, {{"sharded", index}});
}

}  // namespace mixtrain::io::detail
