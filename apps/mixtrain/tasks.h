#pragma once
// The example models the tool can train and benchmark, built by name.
#include <memory>
#include <string>

#include <mixtrain/train/train_loop.h>

namespace mixtrain::cli {

// Model sizes: Default for `mixtrain train` (quick on a CPU), and the benchmark's three: Tiny
// (seconds on a 2-core CPU), Small (CPU-sized: steps of 50-500 ms on a few cores, where the GEMMs
// and convolutions dominate: the MLP as Full, the UNet at width 16 on 3x64x64 at batch 8, the
// transformer at width 256, 4 layers, context 128, batch 16) and Full (the sizes of the Spell AMP
// benchmark: MLP 215-1000-500-1 at batch 512, the 7.7M-parameter UNet at batch 8 on 3x256x256,
// the bert-base-sized transformer at batch 64 and sequence 128).
enum class TaskSize { Default, Tiny, Small, Full };
TaskSize parse_task_size(const std::string& name);  // "tiny" | "small" | "full"
const char* task_size_name(TaskSize size);

struct TaskSpec {
  std::string model;        // mlp | unet | transformer
  Device device = Device::cpu();
  int64_t batch_size = 0;   // 0: the model's default at this size
  uint64_t seed = 0;
  bool synthetic = false;   // generated data, no dataset package needed (always for Tiny and Full)
  TaskSize size = TaskSize::Default;
  bool channels_last = false;  // the UNet's images and activations in NHWC
  bool checkpoint_activations = false;  // recompute each UNet stage / transformer block in backward
};

std::unique_ptr<train::TrainTask> make_task(const TaskSpec& spec);
double default_lr(const std::string& model);
const char* known_models();  // "mlp, unet, transformer"
// Throws std::runtime_error (a usage error) for a name not in known_models().
void check_model_name(const std::string& model);

}  // namespace mixtrain::cli
