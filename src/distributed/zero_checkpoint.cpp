// Checkpoints of a ZeroRedundancyOptimizer run (zero.h): io's format with the whole model's
// optimizer state, gathered into rank 0 to save and cut to each rank's shard to load.
#include <nlohmann/json.hpp>

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
}  // namespace

void save_checkpoint(const std::string& dir, const nn::Module& model, ZeroRedundancyOptimizer& zero,
                     const amp::GradScaler& scaler, int64_t step, const nlohmann::json& extra,
                     const io::CheckpointParts& parts) {
  const io::OptimizerState state = zero.consolidate_state(0);
  if (zero.rank() == 0) io::save_checkpoint(dir, module_tensors(model), state, scaler, step, extra, parts);
}

int64_t load_checkpoint(const std::string& dir, nn::Module& model, ZeroRedundancyOptimizer& zero,
                        amp::GradScaler& scaler, nlohmann::json* extra, const io::CheckpointParts& parts) {
  io::OptimizerState state;
  const int64_t step = io::load_checkpoint(
      dir, module_tensors(model), state, [&](const io::OptimizerState& s) { zero.check_consolidated_state(s); },
      scaler, extra, parts);
  zero.load_consolidated_state(state);
  return step;
}

}  // namespace mixtrain::distributed
