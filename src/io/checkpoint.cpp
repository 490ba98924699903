#include "mixtrain/io/checkpoint.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "core/input_file.h"
#include "core/json_fields.h"
#include "core/json_limits.h"
#include "io/checkpoint_files.h"
#include "io/checkpoint_internal.h"
#include "io/file_util.h"
#include "io/safetensors_internal.h"
#include "mixtrain/base/error.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/base/rng.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/io/optimizer_state.h"

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

// The staging directory of a save, locked (flock) while the save runs so that a loader can tell
// a live save from one a crash left behind (the kernel drops the lock of a killed process).
// Removed unless the save got through.
struct StagingGuard {
  fs::path path;
  int fd = -1;
  bool done = false;
  ~StagingGuard() {
    if (!done) {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
    if (fd >= 0) ::close(fd);
  }
};

// Creates `staged` and locks it; retried when a loader removed it between mkdir and flock.
void create_locked_staging(StagingGuard& guard) {
  for (int attempt = 0;; ++attempt) {
    fs::create_directory(guard.path);
    guard.fd = ::open(guard.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct stat by_fd, by_path;
    if (guard.fd >= 0 && ::flock(guard.fd, LOCK_EX | LOCK_NB) == 0 && ::fstat(guard.fd, &by_fd) == 0 &&
        ::stat(guard.path.c_str(), &by_path) == 0 && by_fd.st_ino == by_path.st_ino && by_fd.st_dev == by_path.st_dev)
      return;
    if (guard.fd >= 0) ::close(guard.fd);
    guard.fd = -1;
    ::usleep(2000);  // a loader is removing what it took for a crash's leftover
    MT_CHECK(attempt < 5, "save_checkpoint: cannot create and lock the staging directory ", guard.path.string(),
             " (another process saving the same checkpoint?)");
  }
}

// A "<dir>.mixtrain-tmp" that no live save holds locked was left by a crash: remove it.
void remove_stale_staging(const fs::path& dir) {
  const fs::path staged = sibling(dir, ".mixtrain-tmp");
  const int fd = ::open(staged.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return;
  struct stat by_fd, by_path;
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0 && ::fstat(fd, &by_fd) == 0 && ::stat(staged.c_str(), &by_path) == 0 &&
      by_fd.st_ino == by_path.st_ino && by_fd.st_dev == by_path.st_dev) {
    std::error_code ec;
    fs::remove_all(staged, ec);  // best effort: a failure leaves it for the next save
  }
  ::close(fd);
}

nlohmann::json write_tensor_file(const fs::path& path, const NamedTensors& tensors, const Metadata& metadata) {
  detail::DurableWriter w(path);
  detail::write_safetensors(w, tensors, metadata);
  w.commit();
  return {{"bytes", w.size()}, {"crc32", crc_hex(w.crc())}};
}

// A checkpoint replaces its directory whole: only a directory holding nothing but a checkpoint's
// own files may be replaced.
void check_replaceable(const fs::path& dir, const char* who) {
  if (!fs::exists(dir)) return;
  MT_CHECK(fs::is_directory(dir), who, ": ", dir.string(), " exists and is not a directory");
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    MT_CHECK(n == kModelFile || n == kOptimizerFile || n == kTrainerFile, who, ": ", dir.string(), " holds \"", n,
             "\", which is not part of a checkpoint; refusing to replace the directory (choose a directory used ",
             "only for this checkpoint)");
  }
}

}  // namespace

bool checkpoint_exists(const std::string& dir_in) {
  const fs::path dir = checkpoint_path(dir_in);
  std::error_code ec;
  return fs::exists(dir / kTrainerFile, ec) || fs::exists(sibling(dir, ".mixtrain-old") / kTrainerFile, ec);
}

void check_checkpoint_destination(const std::string& dir_in) {
  const fs::path dir = checkpoint_path(dir_in);
  check_replaceable(dir, "checkpoint destination");
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

namespace detail {
void set_save_hook(SaveHook hook) { save_hook() = std::move(hook); }
}  // namespace detail

namespace {

// scaler: null for a run without one (fp32, bf16); the checkpoint then has no "scaler" entry. The
// optimizer's part comes as data (checked by the caller where an optimizer can check it).
void save_impl(const std::string& dir_in, const NamedTensors& model, const OptimizerState& optimizer,
               const amp::GradScaler* scaler, int64_t step, const nlohmann::json& extra, const CheckpointParts& parts) {
  MT_CHECK(step >= 0, "save_checkpoint: step must be >= 0, got ", step);
  const fs::path dir = checkpoint_path(dir_in);
  check_replaceable(dir, "save_checkpoint");
  // Whatever this writes, load_checkpoint must accept: check the state with the loader's rules
  // before anything on disk is touched.
  const NamedTensors& opt_tensors = optimizer.tensors;
  const nlohmann::json& opt_state = optimizer.state;
  const nlohmann::json scaler_state = scaler ? scaler->state_dict() : nlohmann::json();
  const nlohmann::json fp8_state = parts.fp8 ? parts.fp8->state_dict() : nlohmann::json();
  try {
    mixtrain::detail::check_json_depth(extra, "extra");
    if (scaler) scaler->validate_state_dict(scaler_state);
    if (parts.fp8) parts.fp8->validate_state_dict(fp8_state, std::map<std::string, Tensor>(model.begin(), model.end()));
  } catch (const Error& e) {
    MT_ERROR("save_checkpoint: refusing to write ", dir.string(), ", which load_checkpoint would reject (the ",
             "previous checkpoint is left as it was): ", e.what());
  }
  const fs::path staged = sibling(dir, ".mixtrain-tmp");
  fs::remove_all(staged);  // left by a save that crashed
  // A complete <dir> supersedes a fallback copy left by an interrupted two-rename swap.
  if (fs::is_directory(dir)) fs::remove_all(sibling(dir, ".mixtrain-old"));
  if (dir.has_parent_path()) fs::create_directories(dir.parent_path());
  StagingGuard guard{staged};
  create_locked_staging(guard);

  nlohmann::json files = nlohmann::json::object();
  files[kModelFile] = write_tensor_file(staged / kModelFile, model, {{"format", "pt"}});
  run_hook(kModelFile);
  files[kOptimizerFile] =
      write_tensor_file(staged / kOptimizerFile, opt_tensors, {{"format", "pt"}, {"optimizer", optimizer.type}});
  run_hook(kOptimizerFile);

  const GeneratorState rng = default_generator().state();
  nlohmann::json trainer = {{"format", kFormat},
                                  {"version", kVersion},
                                  {"step", step},
                                  {"files", files},
                                  {"optimizer", opt_state},
                                  {"rng", {{"seed", rng.seed}, {"offset", rng.offset}}},
                                  {"extra", extra}};
  if (scaler) trainer["scaler"] = scaler_state;
  if (parts.scheduler) trainer["scheduler"] = parts.scheduler->state_dict();
  if (parts.data) trainer["data"] = parts.data->state_dict();
  if (parts.fp8) trainer["fp8"] = fp8_state;
  {
    const std::string text = mixtrain::detail::dump_json(trainer, 2, "save_checkpoint: trainer.json") + "\n";
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

// Where the optimizer's part of a checkpoint goes: checked with the rest, then given the stand-ins'
// real tensors to read into.
struct OptimizerSink {
  std::function<void(const nlohmann::json& state, const NamedTensors& stand_ins)> check;
  std::function<std::map<std::string, Tensor>(const nlohmann::json& state, const NamedTensors& stand_ins)> apply;
};

// scaler: null when the run has none; a checkpoint's "scaler" entry is then left unread, as a
// part saved but not asked for.
int64_t load_with(const std::string& dir_in, const NamedTensors& model, const OptimizerSink& optimizer,
                  amp::GradScaler* scaler, nlohmann::json* extra, const CheckpointParts& parts) {
  fs::path dir = checkpoint_path(dir_in);
  remove_stale_staging(dir);
  if (!fs::exists(dir) && fs::exists(sibling(dir, ".mixtrain-old"))) dir = sibling(dir, ".mixtrain-old");
  MT_CHECK(fs::is_directory(dir), "load_checkpoint: no checkpoint directory ", dir.string());

  // 1. Read and check everything.
  const std::string where = (dir / kTrainerFile).string();
  const mixtrain::detail::InputFile manifest(where, "load_checkpoint");
  const nlohmann::json trainer =
      mixtrain::detail::parse_json_bounded(manifest.read_all(mixtrain::detail::kMaxTextFileBytes), where);
  // "scaler" is optional since runs without a GradScaler save none; older checkpoints all have one.
  json_io::check_object_keys(trainer, {"format", "version", "step", "files", "optimizer", "rng"},
                             {"extra", "scheduler", "data", "scaler", "fp8"},
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

  const detail::CheckpointTensorFile model_file(dir.string(), kModelFile, trainer["files"], manifest);
  const detail::CheckpointTensorFile opt_file(dir.string(), kOptimizerFile, trainer["files"], manifest);

  const std::string mw = model_file.path();
  std::map<std::string, const detail::SafetensorsEntry*> saved;
  for (const auto& e : model_file.index().entries) saved.emplace(e.name, &e);
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
  model_file.verify();
  opt_file.verify();
  // The optimizer's state is checked against shapes and dtypes only (zero-stride stand-ins, no
  // memory), created by load_state_dict, then filled straight from the file: no second copy of
  // the state in memory.
  NamedTensors stand_ins;
  for (const auto& e : opt_file.index().entries)
    stand_ins.emplace_back(e.name, zeros({}, TensorOptions(e.dtype)).expand(e.shape));
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
  const std::map<std::string, Tensor> live = optimizer.apply(trainer["optimizer"], stand_ins);
  std::vector<Tensor> opt_destinations;
  for (const auto& e : opt_file.index().entries) {
    auto it = live.find(e.name);
    MT_CHECK(it != live.end(), "load_checkpoint: internal error: the optimizer has no state tensor \"", e.name, "\"");
    opt_destinations.push_back(it->second);
  }
  opt_file.read_into(opt_destinations);
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
    std::map<std::string, Tensor> live;
    for (const auto& [n, t] : optimizer.state_tensors()) live.emplace(n, t);
    return live;
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
    OptimizerState s{state.is_object() && state.contains("type") && state["type"].is_string()
                         ? state["type"].get<std::string>()
                         : std::string(),
                     state, stand_ins};
    if (check) check(s);
  };
  sink.apply = [&](const nlohmann::json& state, const NamedTensors& stand_ins) {
    optimizer = OptimizerState{state.value("type", std::string()), state, {}};
    std::map<std::string, Tensor> out;
    for (const auto& [n, t] : stand_ins) {
      Tensor real = Tensor::empty(t.shape(), TensorOptions(t.dtype()));
      optimizer.tensors.emplace_back(n, real);
      out.emplace(n, real);
    }
    return out;
  };
  return load_with(dir, model, sink, &scaler, extra, parts);
}

}  // namespace mixtrain::io
