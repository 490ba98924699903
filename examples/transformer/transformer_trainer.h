#pragma once
// The transformer example: a GPT-style byte-level language model (vocabulary 256) trained on a
// plain-text corpus (the fortunes package's files by default, or --text FILE); or, with
// --synthetic, on arithmetic byte sequences (t_i = (s + k i) mod 256, random s and k per
// sequence) generated on the training device. A library so the `mixtrain` tool and the tests
// reuse it.
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "common/run_task.h"
#include "transformer/gpt_model.h"
#include "transformer/text_data.h"

namespace mixtrain::examples {

struct TransformerConfig {
  bool synthetic = false;
  std::string text_path = kFortunesDir;
  GptOptions model;              // context is also the training sequence length
  int64_t synthetic_batches = 4;  // distinct pre-generated batches, reused in turn
  int64_t steps = 300;
  int64_t batch_size = 16;
  double lr = 1e-3;                // peak rate: linear warm-up to it, then cosine decay to 0
  int64_t warmup_steps = -1;       // -1: a tenth of the run's steps
  uint64_t seed = 0;
  train::Precision precision = train::Precision::Fp16;
  Device device = train::default_device();
  int64_t log_every = 50;
  bool memory_plan = false;     // steps served from static memory plans (TrainOptions::memory_plan)
  std::ostream* log = nullptr;
};

// Model sizes by name: "tiny" (2 layers, width 64), "small" (the default: 4 layers, width 128,
// context 64) and "bert-base" (GptOptions::bert_base()). Throws mixtrain::Error for others.
GptOptions gpt_preset(const std::string& name);

struct TransformerResult : RunSummary {  // losses: mean cross-entropy per byte (nats)
  double held_out_loss = 0;
  int64_t non_embedding_parameters = 0;
};

std::unique_ptr<train::TrainTask> make_transformer_task(const TransformerConfig& config);
TransformerResult run_transformer(const TransformerConfig& config);

}  // namespace mixtrain::examples
