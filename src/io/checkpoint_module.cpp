// The nn::Module overloads of save_checkpoint / load_checkpoint: a model's parameters followed
// by its buffers, by dotted name. In a file of their own so that code using only the
// named-tensor overloads does not pull in nn::Module.
#include "mixtrain/io/checkpoint.h"

#include <nlohmann/json.hpp>

namespace mixtrain::io {

namespace {
NamedTensors module_tensors(const nn::Module& model) {
  NamedTensors out = model.named_parameters();
  for (auto& b : model.named_buffers()) out.push_back(std::move(b));
  return out;
}
}  // namespace

void save_checkpoint(const std::string& dir, const nn::Module& model, const optim::Optimizer& optimizer,
                     const amp::GradScaler& scaler, int64_t step, const nlohmann::json& extra,
                     const CheckpointParts& parts) {
  save_checkpoint(dir, module_tensors(model), optimizer, scaler, step, extra, parts);
}

void save_checkpoint(const std::string& dir, const NamedTensors& model, const optim::Optimizer& optimizer,
                     const amp::GradScaler& scaler, int64_t step) {
  save_checkpoint(dir, model, optimizer, scaler, step, nlohmann::json::object());
}

void save_checkpoint(const std::string& dir, const nn::Module& model, const optim::Optimizer& optimizer,
                     const amp::GradScaler& scaler, int64_t step) {
  save_checkpoint(dir, module_tensors(model), optimizer, scaler, step, nlohmann::json::object());
}

int64_t load_checkpoint(const std::string& dir, nn::Module& model, optim::Optimizer& optimizer,
                        amp::GradScaler& scaler, nlohmann::json* extra, const CheckpointParts& parts) {
  return load_checkpoint(dir, module_tensors(model), optimizer, scaler, extra, parts);
}

void save_checkpoint(const std::string& dir, const nn::Module& model, const optim::Optimizer& optimizer, int64_t step,
                     const nlohmann::json& extra, const CheckpointParts& parts) {
  save_checkpoint(dir, module_tensors(model), optimizer, step, extra, parts);
}

int64_t load_checkpoint(const std::string& dir, nn::Module& model, optim::Optimizer& optimizer, nlohmann::json* extra,
                        const CheckpointParts& parts) {
  return load_checkpoint(dir, module_tensors(model), optimizer, extra, parts);
}

void save_checkpoint(const std::string& dir, const NamedTensors& model, const optim::Optimizer& optimizer,
                     int64_t step) {
  save_checkpoint(dir, model, optimizer, step, nlohmann::json::object());
}

void save_checkpoint(const std::string& dir, const nn::Module& model, const optim::Optimizer& optimizer,
                     int64_t step) {
  save_checkpoint(dir, module_tensors(model), optimizer, step, nlohmann::json::object());
}

}  // namespace mixtrain::io
