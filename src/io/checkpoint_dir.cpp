#include "io/checkpoint_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <regex>

#include "core/json_limits.h"
#include "io/checkpoint_internal.h"
#include "io/file_util.h"
#include "io/safetensors_internal.h"
#include "mixtrain/base/error.h"
#include "mixtrain/base/rng.h"
#include "optim/finite_check.h"

namespace mixtrain::io::detail {

namespace fs = std::filesystem;

namespace {

SaveHook& save_hook() {
  static SaveHook hook;
  return hook;
}

bool same_file(int fd, const fs::path& path) {
  struct stat by_fd, by_path;
  return ::fstat(fd, &by_fd) == 0 && ::stat(path.c_str(), &by_path) == 0 && by_fd.st_ino == by_path.st_ino &&
         by_fd.st_dev == by_path.st_dev;
}

}  // namespace

void set_save_hook(SaveHook hook) { save_hook() = std::move(hook); }
void run_save_hook(const std::string& stage) {
  if (save_hook()) save_hook()(stage);
}

std::string shard_file_name(int rank, int world) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "optimizer-rank-%05d-of-%05d.safetensors", rank, world);
  return buf;
}

bool is_shard_file_name(const std::string& name) {
  static const std::regex pattern("optimizer-rank-[0-9]{5}-of-[0-9]{5}\\.safetensors");
  return std::regex_match(name, pattern);
}

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

void check_state_finite(const std::string& dir, const NamedTensors& tensors) {
  std::vector<Tensor> list;
  for (const auto& [n, t] : tensors) list.push_back(t);
  const Tensor flag = optim::detail::scan_non_finite(list);
  if (!flag.defined() || flag.item<float>() == 0.0f) return;
  std::string value;
  const std::string name = optim::detail::first_non_finite(tensors, &value);
  MT_ERROR("save_checkpoint: refusing to write ", checkpoint_path(dir).string(), ": optimizer tensor \"", name,
           "\" holds ", value, ", which load_checkpoint would reject (the previous checkpoint is left as it was)");
}

std::string crc_hex(uint32_t crc) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", crc);
  return buf;
}

void check_replaceable(const fs::path& dir, const char* who) {
  if (!fs::exists(dir)) return;
  MT_CHECK(fs::is_directory(dir), who, ": ", dir.string(), " exists and is not a directory");
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    MT_CHECK(n == kModelFile || n == kOptimizerFile || n == kTrainerFile || is_shard_file_name(n), who, ": ",
             dir.string(), " holds \"", n, "\", which is not part of a checkpoint; refusing to replace the directory ",
             "(choose a directory used only for this checkpoint)");
  }
}

void remove_stale_staging(const fs::path& dir) {
  const fs::path staged = staging_path(dir);
  const int fd = ::open(staged.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return;
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0 && same_file(fd, staged)) {
    std::error_code ec;
    fs::remove_all(staged, ec);  // best effort: a failure leaves it for the next save
  }
  ::close(fd);
}

nlohmann::json write_tensor_file(const fs::path& path, const NamedTensors& tensors, const Metadata& metadata) {
  DurableWriter w(path);
  write_safetensors(w, tensors, metadata);
  w.commit();
  return {{"bytes", w.size()}, {"crc32", crc_hex(w.crc())}};
}

CheckpointStaging::CheckpointStaging(const std::string& dir_in, const NamedTensors& model,
                                     const amp::GradScaler* scaler, const nlohmann::json& extra,
                                     const CheckpointParts& parts)
    : dir_(checkpoint_path(dir_in)), staged_(staging_path(dir_)), extra_(extra), parts_(parts) {
  check_replaceable(dir_, "save_checkpoint");
  // Whatever this writes, load_checkpoint must accept: check the state with the loader's rules
  // before anything on disk is touched.
  if (scaler) scaler_state_ = scaler->state_dict();
  if (parts.fp8) fp8_state_ = parts.fp8->state_dict();
  try {
    mixtrain::detail::check_json_depth(extra, "extra");
    if (scaler) scaler->validate_state_dict(scaler_state_);
    if (parts.fp8)
      parts.fp8->validate_state_dict(fp8_state_, std::map<std::string, Tensor>(model.begin(), model.end()));
  } catch (const Error& e) {
    MT_ERROR("save_checkpoint: refusing to write ", dir_.string(), ", which load_checkpoint would reject (the ",
             "previous checkpoint is left as it was): ", e.what());
  }
  fs::remove_all(staged_);  // left by a save that crashed
  // A complete <dir> supersedes a fallback copy left by an interrupted two-rename swap.
  if (fs::is_directory(dir_)) fs::remove_all(sibling(dir_, ".mixtrain-old"));
  if (dir_.has_parent_path()) fs::create_directories(dir_.parent_path());
  // Created and locked; retried when a loader removed it between mkdir and flock.
  for (int attempt = 0;; ++attempt) {
    fs::create_directory(staged_);
    lock_fd_ = ::open(staged_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (lock_fd_ >= 0 && ::flock(lock_fd_, LOCK_EX | LOCK_NB) == 0 && same_file(lock_fd_, staged_)) return;
    if (lock_fd_ >= 0) ::close(lock_fd_);
    lock_fd_ = -1;
    ::usleep(2000);  // a loader is removing what it took for a crash's leftover
    MT_CHECK(attempt < 5, "save_checkpoint: cannot create and lock the staging directory ", staged_.string(),
             " (another process saving the same checkpoint?)");
  }
}

CheckpointStaging::~CheckpointStaging() {
  if (!done_) {
    std::error_code ec;
    fs::remove_all(staged_, ec);
  }
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void CheckpointStaging::commit(int64_t step, const nlohmann::json& files, const nlohmann::json& optimizer,
                               const nlohmann::json& more) {
  const GeneratorState rng = default_generator().state();
  nlohmann::json trainer = {{"format", kFormat},      {"version", kVersion},
                            {"step", step},           {"files", files},
                            {"optimizer", optimizer}, {"rng", {{"seed", rng.seed}, {"offset", rng.offset}}},
                            {"extra", extra_}};
  if (!scaler_state_.is_null()) trainer["scaler"] = scaler_state_;
  if (parts_.scheduler) trainer["scheduler"] = parts_.scheduler->state_dict();
  if (parts_.data) trainer["data"] = parts_.data->state_dict();
  if (parts_.fp8) trainer["fp8"] = fp8_state_;
  for (const auto& [k, v] : more.items()) trainer[k] = v;
  {
    const std::string text = mixtrain::detail::dump_json(trainer, 2, "save_checkpoint: trainer.json") + "\n";
    DurableWriter w(staged_ / kTrainerFile);
    w.write(text.data(), text.size());
    w.commit();
  }
  run_save_hook(kTrainerFile);
  fsync_directory(staged_);
  run_save_hook("staged");
  replace_directory(staged_, dir_, sibling(dir_, ".mixtrain-old"));
  done_ = true;
}

}  // namespace mixtrain::io::detail
