// libFuzzer target: a checkpoint directory built from the input (trainer.json, model.safetensors
// and optimizer.safetensors, split at the first two "\n--\n" separators) loaded into a small
// model, AdamW optimizer and GradScaler. Only mixtrain::Error may escape, and a rejected load
// must leave the model as it was.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "fuzz_files.h"
#include "mixtrain/mixtrain.h"

namespace fs = std::filesystem;
namespace mt = mixtrain;

using mixtrain::fuzz::work_dir;
using mixtrain::fuzz::write_file;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const size_t a = in.find("\n--\n");
  const size_t b = a == std::string::npos ? std::string::npos : in.find("\n--\n", a + 4);
  if (b == std::string::npos) return 0;
  const fs::path dir = work_dir() / "ckpt";
  fs::create_directories(dir);
  write_file(dir / "trainer.json", in.substr(0, a));
  write_file(dir / "model.safetensors", in.substr(a + 4, b - a - 4));
  write_file(dir / "optimizer.safetensors", in.substr(b + 4));

  mt::io::NamedTensors model{{"w", mt::full({2, 3}, 0.25).set_requires_grad(true)},
                             {"b", mt::zeros({3}, mt::kFloat16).set_requires_grad(true)}};
  mt::optim::AdamW opt(std::vector<mt::Tensor>{model[0].second, model[1].second}, mt::optim::AdamWOptions(1e-3));
  mt::amp::GradScaler scaler(mt::amp::GradScalerOptions().hysteresis(2));
  try {
    nlohmann::json extra;
    mt::io::load_checkpoint(dir.string(), model, opt, scaler, &extra);
  } catch (const mt::Error&) {
    for (float v : model[0].second.to_vector<float>())
      if (v != 0.25f) __builtin_trap();  // a rejected load changed the model
  }
  return 0;
}
