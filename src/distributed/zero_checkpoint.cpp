// Checkpoints of a ZeroRedundancyOptimizer run (zero.h): io's format with the whole model's
// optimizer state, either gathered into rank 0 or sharded (each rank writes its own shard, rank 0
// the index); loaded by every rank as the pieces of its shard. The ranks agree on each step's
// outcome, so a failure on one makes every rank throw, and a load is applied everywhere or nowhere.
#include <cstdio>
#include <exception>
#include <memory>

#include <nlohmann/json.hpp>

#include "io/checkpoint_sharded.h"
#include "mixtrain/base/error.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/distributed/ddp.h"
#include "mixtrain/distributed/zero.h"
#include "mixtrain/io/optimizer_state.h"

namespace mixtrain::distributed {

namespace {

io::NamedTensors module_tensors(const nn::Module& model) {
  io::NamedTensors out = model.named_parameters();
  for (auto& b : model.named_buffers()) out.push_back(std::move(b));
  return out;
}

struct Outcome {
  std::string error;  // empty: it succeeded
  std::exception_ptr thrown;
};

template <class F>
Outcome attempt(F&& f) {
  try {
    f();
    return {};
  } catch (const std::exception& e) {
    return {*e.what() ? e.what() : "an error without a message", std::current_exception()};
  }
}

// Every rank's outcome of one step: "" when all succeeded, else the first failing rank's error
// (each rank's text travels, truncated, in a fixed-size tensor).
std::string first_failure(ProcessGroup& g, const std::string& mine, Device device) {
  constexpr int64_t kChars = 480;
  Tensor t = zeros({kChars + 1}, TensorOptions(kInt32));
  auto* d = static_cast<int32_t*>(t.raw_data());
  d[0] = mine.empty() ? 0 : 1;
  for (size_t i = 0; i < mine.size() && i < static_cast<size_t>(kChars); ++i)
    d[i + 1] = static_cast<unsigned char>(mine[i]);
  const std::vector<Tensor> all = g.all_gather(t.to(device));
  std::string out;
  int failed = 0;
  for (size_t r = 0; r < all.size(); ++r) {
    const std::vector<int32_t> v = all[r].to(Device::cpu()).to_vector<int32_t>();
    if (v[0] == 0) continue;
    if (failed++ > 0) continue;
    out = "rank " + std::to_string(r) + ": ";
    for (size_t k = 1; k < v.size() && v[k] != 0; ++k) out.push_back(static_cast<char>(v[k]));
  }
  if (failed > 1) out += " (and " + std::to_string(failed - 1) + " other ranks failed)";
  return out;
}

// Throws on every rank if any failed: a failing rank its own error, the others the first one's.
void agree(ProcessGroup& g, const Outcome& mine, Device device, const std::string& refused) {
  std::string first;
  try {
    first = first_failure(g, mine.error, device);
  } catch (...) {
    if (mine.thrown) std::rethrow_exception(mine.thrown);
    throw;
  }
  if (mine.thrown) std::rethrow_exception(mine.thrown);
  MT_CHECK(first.empty(), refused, " ", first);
}

// Rank 0's new save id, on every rank (four 32-bit words in an int64 tensor).
std::string shared_save_id(ProcessGroup& g, Device device) {
  Tensor words = zeros({4}, TensorOptions(kInt64));
  if (g.rank() == 0) {
    const std::string id = io::detail::new_save_id();
    for (int i = 0; i < 4; ++i)
      words.data_ptr<int64_t>()[i] = static_cast<int64_t>(std::stoul(id.substr(static_cast<size_t>(i) * 8, 8), nullptr, 16));
  }
  Tensor on_device = words.to(device);
  g.broadcast(on_device, 0);
  const std::vector<int64_t> v = on_device.to(Device::cpu()).to_vector<int64_t>();
  std::string id;
  for (int64_t w : v) {
    char part[9];
    std::snprintf(part, sizeof part, "%08x", static_cast<unsigned>(w));
    id += part;
  }
  return id;
}

Device device_of(ZeroRedundancyOptimizer& zero) {
  return zero.optimizer().param_groups().at(0).params().at(0).device();
}

}  // namespace

void save_checkpoint(const std::string& dir, const nn::Module& model, ZeroRedundancyOptimizer& zero,
                     const amp::GradScaler& scaler, int64_t step, const nlohmann::json& extra,
                     const io::CheckpointParts& parts) {
  const io::OptimizerState state = zero.consolidate_state(0);
  const Outcome written = attempt([&] {
    if (zero.rank() == 0) io::save_checkpoint(dir, module_tensors(model), state, scaler, step, extra, parts);
  });
  agree(zero.group(), written, device_of(zero), "save_checkpoint: " + dir + " was not written by");
}

void save_sharded_checkpoint(const std::string& dir, const nn::Module& model, ZeroRedundancyOptimizer& zero,
                             const amp::GradScaler& scaler, int64_t step, const nlohmann::json& extra,
                             const io::CheckpointParts& parts) {
  ProcessGroup& g = zero.group();
  const int rank = g.rank(), world = g.world_size();
  const Device device = device_of(zero);
  const std::string refused =
      "save_sharded_checkpoint: " + dir + " was not written (the previous checkpoint is left " + "as it was) by";
  const io::NamedTensors tensors = module_tensors(model);
  // 1. Rank 0 checks what a load would refuse and creates the staging directory.
  std::unique_ptr<io::detail::ShardedCheckpointWriter> writer;
  agree(g, attempt([&] {
          if (rank == 0)
            writer = std::make_unique<io::detail::ShardedCheckpointWriter>(dir, tensors, &scaler, extra, parts);
        }),
        device, refused);
  // 2. Every rank writes its shard, checked as load_checkpoint will check it, with its place:
  // this save's id (rank 0's), its rank and its pieces.
  io::detail::ShardPlace place;
  place.save_id = shared_save_id(g, device);
  place.rank = rank;
  place.world = world;
  place.pieces = zero.shard_layout().ranks.at(static_cast<size_t>(rank));
  const optim::Optimizer& opt = zero.optimizer();
  const io::OptimizerState shard{opt.name(), opt.state_dict(), opt.state_tensors()};
  nlohmann::json entry;
  agree(g, attempt([&] {
          opt.validate_state_dict(shard.state, shard.tensors);
          entry = io::detail::write_optimizer_shard(dir, place, shard);
        }),
        device, refused);
  // 3. Rank 0 writes the model and the index, with every shard's size and CRC-32, and swaps.
  Tensor mine = zeros({2}, TensorOptions(kInt64));
  mine.data_ptr<int64_t>()[0] = entry.at("bytes").get<int64_t>();
  mine.data_ptr<int64_t>()[1] = static_cast<int64_t>(std::stoul(entry.at("crc32").get<std::string>(), nullptr, 16));
  const std::vector<Tensor> every = g.all_gather(mine.to(device));
  agree(g, attempt([&] {
          if (rank != 0) return;
          std::vector<nlohmann::json> shards;
          for (const Tensor& t : every) {
            const std::vector<int64_t> v = t.to(Device::cpu()).to_vector<int64_t>();
            shards.push_back({{"bytes", v[0]}, {"crc32", io::detail::crc_hex(static_cast<uint32_t>(v[1]))}});
          }
          std::map<std::string, DType> dtypes;  // "state.<k>.<name>": every piece has the same
          for (const auto& [n, t] : shard.tensors) dtypes.emplace(n.substr(n.find('.', 6) + 1), t.dtype());
          writer->commit(tensors, step, zero.consolidated_state_dict(), zero.shard_layout(), dtypes, shards,
                         place.save_id);
        }),
        device, refused);
}

int64_t load_checkpoint(const std::string& dir, nn::Module& model, ZeroRedundancyOptimizer& zero,
                        amp::GradScaler& scaler, nlohmann::json* extra, const io::CheckpointParts& parts) {
  ProcessGroup& g = zero.group();
  const Device device = device_of(zero);
  const std::string refused = "load_checkpoint: " + dir + " was loaded on no rank: it was refused by";
  io::OptimizerPieces pieces = zero.state_pieces();
  // Every rank has checked everything when the optimizer's check runs: agree there, so that all
  // apply or none does. A rank that failed earlier agrees on its way out.
  bool agreed = false;
  const auto check = pieces.check;
  pieces.check = [&](const io::OptimizerState& whole) {
    agreed = true;
    agree(g, attempt([&] { check(whole); }), device, refused);
  };
  try {
    return io::load_checkpoint(dir, module_tensors(model), pieces, scaler, extra, parts);
  } catch (const std::exception& e) {
    if (!agreed)
      agree(g, Outcome{*e.what() ? e.what() : "an error without a message", std::current_exception()}, device, refused);
    throw;
  }
}

}  // namespace mixtrain::distributed
