#pragma once
// The example models the tool can train, built by name.
#include <memory>
#include <string>

#include "common/train_loop.h"

namespace mixtrain::cli {

struct TaskSpec {
  std::string model;        // mlp | unet | transformer
  Device device = Device::cpu();
  int64_t batch_size = 0;   // 0: the model's default
  uint64_t seed = 0;
  bool synthetic = false;   // generated data, no dataset package needed
  bool benchmark_size = false;  // the sizes of the AMP benchmark (GPU) instead of quick CPU ones
};

std::unique_ptr<examples::TrainTask> make_task(const TaskSpec& spec);
double default_lr(const std::string& model);
const char* known_models();

}  // namespace mixtrain::cli
