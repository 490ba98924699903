#include "mixtrain/io/checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

#include "io/checkpoint_internal.h"
#include "io/file_util.h"
#include "io/safetensors_internal.h"
#include "mixtrain/autograd/grad_mode.h"
#include "mixtrain/core/error.h"
#include "mixtrain/core/rng.h"
#include "optim/json_fields.h"

namespace mixtrain::io {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "mixtrain-checkpoint";
constexpr int64_t kVersion = 1;
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kTrainerFile = "trainer.json";

detail::SaveHook& save_hook() {
  static detail::SaveHook hook;
  return hook;
}
void run_hook(const std::string& stage) {
  if (save_hook()) save_hook()(stage);
}

// "ckpt/" and "ckpt" name the same directory.
fs::path checkpoint_path(const std::string& dir) {
  MT_CHECK(!dir.empty(), "checkpoint: empty directory name");
  fs::path p = fs::path(dir).lexically_normal();
  if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();
  return p;
}
fs::path sibling(const fs::path& dir, const char* suffix) {
  fs::path p = dir;
  p += suffix;
  return p;
}

std::string crc_hex(uint32_t crc) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", crc);
  return buf;
}

// Removes the staging directory unless the save got through.
struct StagingGuard {
  fs::path path;
  bool done = false;
  ~StagingGuard() {
    if (!done) {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  }
};

nlohmann::json write_tensor_file(const fs::path& path, const NamedTensors& tensors, const Metadata& metadata) {
  detail::DurableWriter w(path);
  detail::write_safetensors(w, tensors, metadata);
  w.commit();
  return {{"bytes", w.size()}, {"crc32", crc_hex(w.crc())}};
}

// Reads a safetensors file of the checkpoint and checks it against the manifest entry.
SafetensorsFile read_tensor_file(const fs::path& dir, const char* name, const nlohmann::json& files) {
  const std::string where = (dir / kTrainerFile).string() + " files";
  json_io::check_object_keys(json_io::json_field(files, name, where), {"bytes", "crc32"}, {},
                             json_io::json_path(where, name));
  const nlohmann::json& entry = files[name];
  const uint64_t bytes = json_io::json_unsigned(entry, "bytes", json_io::json_path(where, name));
  const std::string crc = json_io::json_string(entry, "crc32", json_io::json_path(where, name));
  const fs::path path = dir / name;
  const std::string data = detail::read_file(path, "checkpoint");
  MT_CHECK(data.size() == bytes, "checkpoint: ", path.string(), " has ", data.size(), " bytes but the manifest says ",
           bytes, " (truncated, or replaced after the checkpoint was written)");
  MT_CHECK(crc_hex(detail::crc32(data.data(), data.size())) == crc, "checkpoint: ", path.string(),
           " does not match its CRC-32 in the manifest (the file was edited or corrupted)");
  return parse_safetensors(data, path.string());
}

}  // namespace

namespace detail {
void set_save_hook(SaveHook hook) { save_hook() = std::move(hook); }
}  // namespace detail

void save_checkpoint(const std::string& dir_in, const NamedTensors& model, const optim::Optimizer& optimizer,
                     const amp::GradScaler& scaler, int64_t step, const nlohmann::json& extra,
                     const CheckpointParts& parts) {
  MT_CHECK(step >= 0, "save_checkpoint: step must be >= 0, got ", step);
  const fs::path dir = checkpoint_path(dir_in);
  if (fs::exists(dir)) {
    MT_CHECK(fs::is_directory(dir), "save_checkpoint: ", dir.string(), " exists and is not a directory");
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string n = e.path().filename().string();
      MT_CHECK(n == kModelFile || n == kOptimizerFile || n == kTrainerFile, "save_checkpoint: ", dir.string(),
               " holds \"", n, "\", which is not part of a checkpoint; refusing to replace the directory (choose ",
               "a directory used only for this checkpoint)");
    }
  }
  const fs::path staged = sibling(dir, ".mixtrain-tmp");
  fs::remove_all(staged);  // left by a save that crashed
  if (dir.has_parent_path()) fs::create_directories(dir.parent_path());
  fs::create_directory(staged);
  StagingGuard guard{staged};

  nlohmann::json files = nlohmann::json::object();
  files[kModelFile] = write_tensor_file(staged / kModelFile, model, {{"format", "pt"}});
  run_hook(kModelFile);
  files[kOptimizerFile] =
      write_tensor_file(staged / kOptimizerFile, optimizer.state_tensors(), {{"format", "pt"}, {"optimizer", optimizer.name()}});
  run_hook(kOptimizerFile);

  const GeneratorState rng = default_generator().state();
  nlohmann::json trainer = {{"format", kFormat},
                                  {"version", kVersion},
                                  {"step", step},
                                  {"files", files},
                                  {"optimizer", optimizer.state_dict()},
                                  {"scaler", scaler.state_dict()},
                                  {"rng", {{"seed", rng.seed}, {"offset", rng.offset}}},
                                  {"extra", extra}};
  if (parts.scheduler) trainer["scheduler"] = parts.scheduler->state_dict();
  if (parts.data) trainer["data"] = parts.data->state_dict();
  {
    const std::string text = trainer.dump(2) + "\n";
    detail::DurableWriter w(staged / kTrainerFile);
    w.write(text.data(), text.size());
    w.commit();
  }
  run_hook(kTrainerFile);
  detail::fsync_directory(staged);
  run_hook("staged");
  detail::replace_directory(staged, dir, sibling(dir, ".mixtrain-old"));
  guard.done = true;
}

int64_t load_checkpoint(const std::string& dir_in, const NamedTensors& model, optim::Optimizer& optimizer,
                        amp::GradScaler& scaler, nlohmann::json* extra, const CheckpointParts& parts) {
  fs::path dir = checkpoint_path(dir_in);
  if (!fs::exists(dir) && fs::exists(sibling(dir, ".mixtrain-old"))) dir = sibling(dir, ".mixtrain-old");
  MT_CHECK(fs::is_directory(dir), "load_checkpoint: no checkpoint directory ", dir.string());

  // 1. Read and check everything.
  const fs::path trainer_path = dir / kTrainerFile;
  const std::string where = trainer_path.string();
  nlohmann::json trainer;
  try {
    trainer = nlohmann::json::parse(detail::read_file(trainer_path, "load_checkpoint"));
  } catch (const nlohmann::json::exception& e) {
    MT_ERROR("load_checkpoint: ", where, " is not valid JSON: ", e.what());
  }
  json_io::check_object_keys(trainer, {"format", "version", "step", "files", "optimizer", "scaler", "rng"},
                             {"extra", "scheduler", "data"},
                             where);
  MT_CHECK(json_io::json_string(trainer, "format", where) == kFormat, where, ".format must be \"", kFormat, "\"");
  const int64_t version = json_io::json_integer(trainer, "version", where, 0, std::numeric_limits<int64_t>::max());
  MT_CHECK(version == kVersion, where, ".version ", version, " is not supported (this build reads version ", kVersion, ")");
  const int64_t step = json_io::json_integer(trainer, "step", where, 0, std::numeric_limits<int64_t>::max());
  json_io::check_object_keys(trainer["files"], {kModelFile, kOptimizerFile}, {}, where + ".files");
  json_io::check_object_keys(trainer["rng"], {"seed", "offset"}, {}, where + ".rng");
  GeneratorState rng;
  rng.seed = json_io::json_unsigned(trainer["rng"], "seed", where + ".rng");
  rng.offset = json_io::json_unsigned(trainer["rng"], "offset", where + ".rng");

  const SafetensorsFile model_file = read_tensor_file(dir, kModelFile, trainer["files"]);
  const SafetensorsFile opt_file = read_tensor_file(dir, kOptimizerFile, trainer["files"]);

  const std::string mw = (dir / kModelFile).string();
  std::map<std::string, const Tensor*> saved;
  for (const auto& [n, t] : model_file.tensors) saved.emplace(n, &t);
  std::set<std::string> names;
  std::vector<std::pair<Tensor, const Tensor*>> copies;
  for (const auto& [n, t] : model) {
    MT_CHECK(names.insert(n).second, "load_checkpoint: the model names tensor \"", n, "\" twice");
    auto it = saved.find(n);
    MT_CHECK(it != saved.end(), "load_checkpoint: ", mw, " has no tensor \"", n, "\", which the model has");
    const Tensor& s = *it->second;
    MT_CHECK(t.defined() && s.shape() == t.shape() && s.dtype() == t.dtype(), "load_checkpoint: ", mw, ": tensor \"",
             n, "\" is ", shape_str(s.shape()), " ", s.dtype(), " but the model's is ",
             t.defined() ? shape_str(t.shape()) + " " + dtype_name(t.dtype()) : std::string("undefined"));
    copies.emplace_back(t, &s);
  }
  for (const auto& [n, t] : model_file.tensors)
    MT_CHECK(names.count(n), "load_checkpoint: ", mw, " has tensor \"", n, "\", which the model does not have");
  optimizer.validate_state_dict(trainer["optimizer"], opt_file.tensors);
  scaler.validate_state_dict(trainer["scaler"]);
  auto part = [&](const void* given, const char* key, const char* what) -> const nlohmann::json* {
    if (!given) return nullptr;
    MT_CHECK(trainer.contains(key), "load_checkpoint: ", where, " has no \"", key, "\" entry, but ", what,
             " was given to restore (the checkpoint was saved without one)");
    return &trainer[key];
  };
  const nlohmann::json* scheduler_state = part(parts.scheduler, "scheduler", "a learning-rate scheduler");
  const nlohmann::json* data_state = part(parts.data, "data", "a data loader");
  if (scheduler_state) parts.scheduler->validate_state_dict(*scheduler_state);
  if (data_state) parts.data->validate_state_dict(*data_state);

  // 2. Apply; nothing below can fail on the checked data.
  {
    NoGradGuard no_grad;
    for (auto& [dst, src] : copies) dst.copy_(*src);
  }
  optimizer.load_state_dict(trainer["optimizer"], opt_file.tensors);
  scaler.load_state_dict(trainer["scaler"]);
  default_generator().set_state(rng);
  if (scheduler_state) parts.scheduler->load_state_dict(*scheduler_state);
  if (data_state) parts.data->load_state_dict(*data_state);
  if (extra) *extra = trainer.contains("extra") ? trainer["extra"] : nlohmann::json::object();
  return step;
}

}  // namespace mixtrain::io
