// Builds the example trainers' tasks by name and size.
#include "tasks.h"

#include <algorithm>
#include <stdexcept>

#include <mixtrain/base/checked_int.h>

#include "mlp/mlp_trainer.h"
#include "transformer/transformer_trainer.h"
#include "unet/unet_trainer.h"

namespace mixtrain::cli {

TaskSize parse_task_size(const std::string& name) {
  if (name == "tiny") return TaskSize::Tiny;
  if (name == "small") return TaskSize::Small;
  if (name == "full") return TaskSize::Full;
  throw std::runtime_error("--size expects tiny, small or full, got '" + name + "'");
}

const char* task_size_name(TaskSize size) {
  switch (size) {
    case TaskSize::Default: return "default";
    case TaskSize::Tiny: return "tiny";
    case TaskSize::Small: return "small";
    case TaskSize::Full: return "full";
  }
  return "?";
}

const char* known_models() { return "mlp, unet, transformer"; }

void check_model_name(const std::string& model) {
  if (model != "mlp" && model != "unet" && model != "transformer")
    throw std::runtime_error("unknown model '" + model + "' (expected one of " + known_models() + ")");
}

double default_lr(const std::string& model) {
  check_model_name(model);
  return 1e-3;
}

namespace {

int64_t pick(int64_t requested, int64_t fallback) { return requested > 0 ? requested : fallback; }

// The benchmark presets' synthetic MLP data: four batches, and at least the 8 rows the MLP task
// needs (its test set is an eighth of them), so batch 1 works too.
int64_t synthetic_rows(int64_t batch_size) {
  return std::max<int64_t>(8, checked_mul(4, batch_size, "mlp: synthetic rows (4 batches)"));
}

std::unique_ptr<train::TrainTask> make_mlp(const TaskSpec& s) {
  examples::MlpConfig c;
  c.device = s.device;
  c.seed = s.seed;
  switch (s.size) {
    case TaskSize::Default:
      c.task = s.synthetic ? examples::MlpTask::Synthetic : examples::MlpTask::FashionMnist;
      c.batch_size = pick(s.batch_size, 128);
      break;
    case TaskSize::Tiny:
      c.task = examples::MlpTask::Synthetic;
      c.hidden = {256, 128};
      c.batch_size = pick(s.batch_size, 64);
      c.synthetic_samples = synthetic_rows(c.batch_size);
      break;
    case TaskSize::Small:  // the full MLP is already CPU-sized
    case TaskSize::Full:
      c.task = examples::MlpTask::Synthetic;
      c.hidden = {1000, 500};
      c.batch_size = pick(s.batch_size, 512);
      c.synthetic_samples = synthetic_rows(c.batch_size);
      break;
  }
  return examples::make_mlp_task(c);
}

std::unique_ptr<train::TrainTask> make_unet(const TaskSpec& s) {
  examples::UnetConfig c;
  c.device = s.device;
  c.seed = s.seed;
  c.synthetic = s.synthetic || s.size != TaskSize::Default;
  c.channels_last = s.channels_last;
  c.checkpoint_activations = s.checkpoint_activations;
  switch (s.size) {
    case TaskSize::Default:
      c.batch_size = pick(s.batch_size, 8);
      break;
    case TaskSize::Tiny:
      c.width = 8;
      c.image_size = 32;
      c.batch_size = pick(s.batch_size, 4);
      break;
    case TaskSize::Small:
      c.width = 16;
      c.image_size = 64;
      c.batch_size = pick(s.batch_size, 8);
      break;
    case TaskSize::Full:  // the Spell UNet: 3x256x256 in, 9 classes, 7,703,497 parameters
      c.width = 64;
      c.image_size = 256;
      c.batch_size = pick(s.batch_size, 8);
      break;
  }
  return examples::make_unet_task(c);
}

std::unique_ptr<train::TrainTask> make_transformer(const TaskSpec& s) {
  examples::TransformerConfig c;
  c.device = s.device;
  c.seed = s.seed;
  c.synthetic = s.synthetic || s.size != TaskSize::Default;
  switch (s.size) {
    case TaskSize::Default:
      c.batch_size = pick(s.batch_size, 16);
      break;
    case TaskSize::Tiny:
      c.model = examples::gpt_preset("tiny");
      c.batch_size = pick(s.batch_size, 8);
      break;
    case TaskSize::Small:  // 4 layers of width 256 (4 heads) at context 128
      c.model.context = 128;
      c.model.width = 256;
      c.model.layers = 4;
      c.model.heads = 4;
      c.batch_size = pick(s.batch_size, 16);
      break;
    case TaskSize::Full:
      c.model = examples::gpt_preset("bert-base");
      c.batch_size = pick(s.batch_size, 64);
      break;
  }
  c.model.checkpoint_activations = s.checkpoint_activations;
  return examples::make_transformer_task(c);
}

}  // namespace

std::unique_ptr<train::TrainTask> make_task(const TaskSpec& spec) {
  check_model_name(spec.model);
  if (spec.model == "mlp") return make_mlp(spec);
  if (spec.model == "unet") return make_unet(spec);
  return make_transformer(spec);
}

}  // namespace mixtrain::cli
