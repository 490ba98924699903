#include "mixtrain/io/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "core/input_file.h"
#include "core/json_fields.h"
#include "core/json_limits.h"
#include "io/checkpoint_dir.h"
#include "io/checkpoint_files.h"
#include "io/optimizer_files.h"
#include "mixtrain/base/error.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/base/rng.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/io/optimizer_state.h"

namespace mixtrain::io {

namespace fs = std::filesystem;

using detail::checkpoint_path;
using detail::kModelFile;
using detail::kOptimizerFile;
using detail::kTrainerFile;
using detail::sibling;

bool checkpoint_exists(const std::string& dir_in) {
  const fs::path dir = checkpoint_path(dir_in);
  std::error_code ec;
  return fs::exists(dir / kTrainerFile, ec) || fs::exists(sibling(dir, ".mixtrain-old") / kTrainerFile, ec);
}

void check_checkpoint_destination(const std::string& dir_in) {
  const fs::path dir = checkpoint_path(dir_in);
  detail::check_replaceable(dir, "checkpoint destination");
  // save_checkpoint stages beside dir, so the nearest existing directory above it must take a
  // new file: try one (permissions alone say nothing for root or a read-only mount).
  fs::path existing = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
  while (!existing.empty() && !fs::exists(existing)) existing = existing.parent_path();
  if (existing.empty()) existing = ".";
  MT_CHECK(fs::is_directory(existing), "checkpoint destination: cannot write ", dir.string(), ": ", existing.string(),
           " is not a directory");
  std::string probe = (existing / ".mixtrain-probe-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  MT_CHECK(fd >= 0, "checkpoint destination: cannot write ", dir.string(), ": cannot create a file in ",
           existing.string(), ": ", std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

namespace {

// scaler: null for a run without one (fp32, bf16); the checkpoint then has no "scaler" entry. The
// optimizer's part comes as data (checked by the caller where an optimizer can check it).
void save_impl(const std::string& dir, const NamedTensors& model, const OptimizerState& optimizer,
               const amp::GradScaler* scaler, int64_t step, const nlohmann::json& extra, const CheckpointParts& parts) {
  MT_CHECK(step >= 0, "save_checkpoint: step must be >= 0, got ", step);
  detail::check_state_finite(dir, optimizer.tensors);
  detail::CheckpointStaging staging(dir, model, scaler, extra, parts);
  nlohmann::json files = nlohmann::json::object();
  files[kModelFile] = detail::write_tensor_file(staging.staged() / kModelFile, model, {{"format", "pt"}});
  detail::run_save_hook(kModelFile);
  files[kOptimizerFile] = detail::write_tensor_file(staging.staged() / kOptimizerFile, optimizer.tensors,
                                                    {{"format", "pt"}, {"optimizer", optimizer.type}});
  detail::run_save_hook(kOptimizerFile);
  staging.commit(step, files, optimizer.state, nlohmann::json::object());
}

// Where the optimizer's part of a checkpoint goes: checked with the rest (against zero-stride
// stand-ins of the whole tensors), then applied, giving the tensors the stored bytes go into.
struct OptimizerSink {
  const std::vector<StatePiece>* needs = nullptr;  // the elements the optimizer holds; null: all
  std::function<void(const nlohmann::json& state, const NamedTensors& stand_ins)> check;
  std::function<std::vector<detail::StateDestination>(const nlohmann::json& state, const NamedTensors& stand_ins)>
      apply;
};

std::string type_of(const nlohmann::json& state) {
  return state.is_object() && state.contains("type") && state["type"].is_string() ? state["type"].get<std::string>()
                                                                                  : std::string();
}

std::vector<detail::StateDestination> whole_destinations(const NamedTensors& tensors) {
  std::vector<detail::StateDestination> out;
  for (const auto& [n, t] : tensors) out.push_back({n, 0, t});
  return out;
}

// trainer.json's keys, format and version checked; its step.
int64_t manifest_step(const nlohmann::json& trainer, const std::string& where) {
  // "scaler" is optional since runs without a GradScaler save none; older checkpoints all have one.
  json_io::check_object_keys(trainer, {"format", "version", "step", "files", "optimizer", "rng"},
                             {"extra", "scheduler", "data", "scaler", "fp8", "sharded"}, where);
  MT_CHECK(json_io::json_string(trainer, "format", where) == detail::kFormat, where, ".format must be \"",
           detail::kFormat, "\"");
  const int64_t version = json_io::json_integer(trainer, "version", where, 0, std::numeric_limits<int64_t>::max());
  MT_CHECK(version == detail::kVersion, where, ".version ", version, " is not supported (this build reads version ",
           detail::kVersion, ")");
  return json_io::json_integer(trainer, "step", where, 0, std::numeric_limits<int64_t>::max());
}

// The model's tensors in the file's order, each matched to its saved entry (name, shape, dtype)
// both ways: a tensor either side lacks is an error naming it.
std::vector<Tensor> model_destinations(const detail::CheckpointTensorFile& model_file, const NamedTensors& model,
                                       const std::map<std::string, const detail::SafetensorsEntry*>& saved) {
  const std::string mw = model_file.path();
  std::map<std::string, Tensor> by_name;
  for (const auto& [n, t] : model) {
    MT_CHECK(by_name.emplace(n, t).second, "load_checkpoint: the model names tensor \"", n, "\" twice");
    auto it = saved.find(n);
    MT_CHECK(it != saved.end(), "load_checkpoint: ", mw, " has no tensor \"", n, "\", which the model has");
    const detail::SafetensorsEntry& e = *it->second;
    MT_CHECK(t.defined() && e.shape == t.shape() && e.dtype == t.dtype(), "load_checkpoint: ", mw, ": tensor \"", n,
             "\" is ", shape_str(e.shape), " ", e.dtype, " but the model's is ",
             t.defined() ? shape_str(t.shape()) + " " + dtype_name(t.dtype()) : std::string("undefined"));
  }
  std::vector<Tensor> destinations;  // in file order
  for (const auto& e : model_file.index().entries) {
    auto it = by_name.find(e.name);
    MT_CHECK(it != by_name.end(), "load_checkpoint: ", mw, " has tensor \"", e.name, "\", which the model does not have",
             e.name.find("fp8_") != std::string::npos
                 ? " (FP8 scaling state: the checkpoint comes from FP8 training; give the model's Linear layers their "
                   "state with amp::Fp8Scaling before loading)"
                 : "");
    destinations.push_back(it->second);
  }
  return destinations;
}

// scaler: null when the run has none; a checkpoint's "scaler" entry is then left unread, as a
// part saved but not asked for.
int64_t load_with(const std::string& dir_in, const NamedTensors& model, const OptimizerSink& optimizer,
                  amp::GradScaler* scaler, nlohmann::json* extra, const CheckpointParts& parts) {
  fs::path dir = checkpoint_path(dir_in);
  detail::remove_stale_staging(dir);
  if (!fs::exists(dir) && fs::exists(sibling(dir, ".mixtrain-old"))) dir = sibling(dir, ".mixtrain-old");
  MT_CHECK(fs::is_directory(dir), "load_checkpoint: no checkpoint directory ", dir.string());

  // 1. Read and check everything.
  const std::string where = (dir / kTrainerFile).string();
  // A save writes the index last: shards without it are a save that never finished.
  std::error_code ec;
  MT_CHECK(fs::exists(where, ec) || fs::is_symlink(where, ec), "load_checkpoint: ", where,
           " is missing: ", dir.string(),
           " is no complete checkpoint (trainer.json, the index, is written last; without it nothing is loaded)");
  const mixtrain::detail::InputFile manifest(where, "load_checkpoint");
  const nlohmann::json trainer =
      mixtrain::detail::parse_json_bounded(manifest.read_all(mixtrain::detail::kMaxTextFileBytes), where);
  const int64_t step = manifest_step(trainer, where);
  // The optimizer's files (one, or a sharded save's shards) with the manifest's "files".
  const detail::OptimizerFiles opt_files(dir.string(), trainer, manifest);
  json_io::check_object_keys(trainer["rng"], {"seed", "offset"}, {}, where + ".rng");
  GeneratorState rng;
  rng.seed = json_io::json_unsigned(trainer["rng"], "seed", where + ".rng");
  rng.offset = json_io::json_unsigned(trainer["rng"], "offset", where + ".rng");

  const detail::CheckpointTensorFile model_file(dir.string(), kModelFile, trainer["files"], manifest);

  std::map<std::string, const detail::SafetensorsEntry*> saved;
  for (const auto& e : model_file.index().entries) saved.emplace(e.name, &e);
  const std::vector<Tensor> destinations = model_destinations(model_file, model, saved);
  model_file.verify();
  opt_files.verify(optimizer.needs);
  // The optimizer's state is checked against shapes and dtypes only (zero-stride stand-ins, no
  // memory), created by load_state_dict, then filled straight from the files: no second copy of
  // the state in memory.
  const NamedTensors& stand_ins = opt_files.stand_ins();
  auto part = [&](const void* given, const char* key, const char* what) -> const nlohmann::json* {
    if (!given) return nullptr;
    MT_CHECK(trainer.contains(key), "load_checkpoint: ", where, " has no \"", key, "\" entry, but ", what,
             " was given to restore (the checkpoint was saved without one)");
    return &trainer[key];
  };
  const nlohmann::json* scheduler_state = part(parts.scheduler, "scheduler", "a learning-rate scheduler");
  const nlohmann::json* data_state = part(parts.data, "data", "a data loader");
  const nlohmann::json* scaler_state = part(scaler, "scaler", "a GradScaler");
  if (scaler_state) scaler->validate_state_dict(*scaler_state);
  if (scheduler_state) parts.scheduler->validate_state_dict(*scheduler_state);
  if (data_state) parts.data->validate_state_dict(*data_state);
  const nlohmann::json* fp8_state = part(parts.fp8, "fp8", "an amp::Fp8Scaling");
  if (fp8_state) {
    // The scales and histories as they would be loaded, read ahead (they are small) and checked.
    std::map<std::string, Tensor> fp8_tensors;
    for (const std::string& n : parts.fp8->tensor_names())
      if (auto it = saved.find(n); it != saved.end()) fp8_tensors.emplace(n, model_file.read_entry(*it->second));
    parts.fp8->validate_state_dict(*fp8_state, fp8_tensors);
  }
  optimizer.check(trainer["optimizer"], stand_ins);

  // 2. Apply; nothing below can fail on the checked data (short of a file being rewritten in
  // place while it is read, which read_into reports).
  model_file.read_into(destinations);
  opt_files.read(optimizer.apply(trainer["optimizer"], stand_ins));
  if (scaler_state) scaler->load_state_dict(*scaler_state);
  default_generator().set_state(rng);
  if (scheduler_state) parts.scheduler->load_state_dict(*scheduler_state);
  if (data_state) parts.data->load_state_dict(*data_state);
  if (fp8_state) parts.fp8->load_state_dict(*fp8_state);
  if (extra) *extra = trainer.contains("extra") ? trainer["extra"] : nlohmann::json::object();
  return step;
}

// The optimizer's state as data, checked by the optimizer that holds it.
OptimizerState checked_state(const std::string& dir, const optim::Optimizer& optimizer) {
  OptimizerState state{optimizer.name(), optimizer.state_dict(), optimizer.state_tensors()};
  try {
    optimizer.validate_state_dict(state.state, state.tensors);
  } catch (const Error& e) {
    MT_ERROR("save_checkpoint: refusing to write ", checkpoint_path(dir).string(), ", which load_checkpoint would ",
             "reject (the previous checkpoint is left as it was): ", e.what());
  }
  return state;
}

OptimizerSink sink_of(optim::Optimizer& optimizer) {
  OptimizerSink sink;
  sink.check = [&](const nlohmann::json& state, const NamedTensors& stand_ins) {
    optimizer.validate_state_dict(state, stand_ins);
  };
  sink.apply = [&](const nlohmann::json& state, const NamedTensors& stand_ins) {
    optimizer.load_state_dict(state, stand_ins);
    return whole_destinations(optimizer.state_tensors());
  };
  return sink;
}

}  // namespace

void save_checkpoint(const std::string& dir, const NamedTensors& model, const optim::Optimizer& optimizer,
                     const amp::GradScaler& scaler, int64_t step, const nlohmann::json& extra,
                     const CheckpointParts& parts) {
  save_impl(dir, model, checked_state(dir, optimizer), &scaler, step, extra, parts);
}

void save_checkpoint(const std::string& dir, const NamedTensors& model, const optim::Optimizer& optimizer,
                     int64_t step, const nlohmann::json& extra, const CheckpointParts& parts) {
  save_impl(dir, model, checked_state(dir, optimizer), nullptr, step, extra, parts);
}

void save_checkpoint(const std::string& dir, const NamedTensors& model, const OptimizerState& optimizer,
                     const amp::GradScaler& scaler, int64_t step, const nlohmann::json& extra,
                     const CheckpointParts& parts) {
  save_impl(dir, model, optimizer, &scaler, step, extra, parts);
}

int64_t load_checkpoint(const std::string& dir, const NamedTensors& model, optim::Optimizer& optimizer,
                        amp::GradScaler& scaler, nlohmann::json* extra, const CheckpointParts& parts) {
  return load_with(dir, model, sink_of(optimizer), &scaler, extra, parts);
}

int64_t load_checkpoint(const std::string& dir, const NamedTensors& model, optim::Optimizer& optimizer,
                        nlohmann::json* extra, const CheckpointParts& parts) {
  return load_with(dir, model, sink_of(optimizer), nullptr, extra, parts);
}

int64_t load_checkpoint(const std::string& dir, const NamedTensors& model, OptimizerState& optimizer,
                        const std::function<void(const OptimizerState&)>& check, amp::GradScaler& scaler,
                        nlohmann::json* extra, const CheckpointParts& parts) {
  OptimizerSink sink;
  sink.check = [&](const nlohmann::json& state, const NamedTensors& stand_ins) {
    if (check) check(OptimizerState{type_of(state), state, stand_ins});
  };
  sink.apply = [&](const nlohmann::json& state, const NamedTensors& stand_ins) {
    optimizer = OptimizerState{state.value("type", std::string()), state, {}};
    for (const auto& [n, t] : stand_ins)
      optimizer.tensors.emplace_back(n, Tensor::empty(t.shape(), TensorOptions(t.dtype())));
    return whole_destinations(optimizer.tensors);
  };
  return load_with(dir, model, sink, &scaler, extra, parts);
}

int64_t load_checkpoint(const std::string& dir, const NamedTensors& model, const OptimizerPieces& optimizer,
                        amp::GradScaler& scaler, nlohmann::json* extra, const CheckpointParts& parts) {
  MT_CHECK(optimizer.check && optimizer.apply, "load_checkpoint: OptimizerPieces needs check and apply");
  OptimizerSink sink;
  sink.needs = &optimizer.pieces;
  sink.check = [&](const nlohmann::json& state, const NamedTensors& stand_ins) {
    optimizer.check(OptimizerState{type_of(state), state, stand_ins});
  };
  sink.apply = [&](const nlohmann::json& state, const NamedTensors& stand_ins) {
    // The optimizer's piece k of "state.<k>.<name>" is elements of the whole "state.<param>.<name>".
    std::vector<detail::StateDestination> out;
    for (const auto& [n, t] : optimizer.apply(OptimizerState{type_of(state), state, stand_ins})) {
      const size_t dot = n.find('.', 6);
      const size_t k = n.rfind("state.", 0) == 0 && dot != std::string::npos
                           ? static_cast<size_t>(std::strtoull(n.c_str() + 6, nullptr, 10))
                           : optimizer.pieces.size();
      MT_CHECK(k < optimizer.pieces.size() && t.numel() == optimizer.pieces[k].numel, "load_checkpoint: internal ",
               "error: the optimizer's state tensor \"", n, "\" is not one of its ", optimizer.pieces.size(),
               " pieces'");
      const StatePiece& p = optimizer.pieces[k];
      out.push_back({"state." + std::to_string(p.param) + n.substr(dot), p.offset, t});
    }
    return out;
  };
  return load_with(dir, model, sink, &scaler, extra, parts);
}

}  // namespace mixtrain::io
