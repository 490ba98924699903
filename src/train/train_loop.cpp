// The training loop's vocabulary (train_loop.h): precisions, devices, a rank's data shard, the
// task's defaults, the step record's JSON and the logged loop. The step and the loop themselves are
// the Trainer's (trainer.cpp, trainer_run.cpp).
#include "mixtrain/train/train_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <iomanip>
#include <memory>
#include <ostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "mixtrain/amp/autocast.h"
#include "mixtrain/amp/fp8.h"
#include "mixtrain/base/error.h"
#include "mixtrain/distributed/sampler.h"

namespace mixtrain::train {

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::Fp32;
  if (name == "fp16") return Precision::Fp16;
  if (name == "bf16") return Precision::Bf16;
  if (name == "fp8") return Precision::Fp8;
  MT_ERROR("unknown precision '", name, "' (expected fp32, fp16, bf16 or fp8)");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::Fp32: return "fp32";
    case Precision::Fp16: return "fp16";
    case Precision::Bf16: return "bf16";
    case Precision::Fp8: return "fp8";
  }
  return "?";
}

ForwardScope::ForwardScope(DeviceType device, Precision p, const amp::Fp8Recipe& recipe) {
  if (p == Precision::Fp8) fp8_.emplace(device, recipe);
  else autocast_.emplace(device, p == Precision::Bf16 ? kBFloat16 : kFloat16, p != Precision::Fp32);
}

std::unique_ptr<amp::Fp8Scaling> make_fp8_scaling(nn::Module& model, Precision p, const amp::Fp8Recipe& recipe) {
  return p == Precision::Fp8 ? std::make_unique<amp::Fp8Scaling>(model, recipe) : nullptr;
}

int rank_cuda_index(const distributed::LaunchEnv& env) { return env.world_size > 1 ? env.local_rank : 0; }

// Not checked here: a default is set before the flags are read, and `--device cpu` on a rank whose
// GPU does not exist must not fail on it; train() checks the device it is given.
Device default_device() {
  return cuda::is_available() ? Device::cuda(rank_cuda_index(distributed::read_launch_env())) : Device::cpu();
}

// `name`: as the user spelled it ("cuda" is this rank's GPU under a launcher).
void check_device_available(const Device& d, const std::string& name) {
  if (!d.is_cuda()) return;
  std::string what = "'" + name + "'";
  if (name == "cuda" && d.index != 0) what += " (" + d.str() + ", this rank's LOCAL_RANK)";
  MT_CHECK(cuda::is_available() && d.index < cuda::device_count(), "device ", what, " is not available: ",
           cuda::is_available() ? "no such CUDA device" : "no CUDA device (or built without CUDA)", "; use --device cpu");
}

Device parse_device(const std::string& name) {
  MT_CHECK(name == "cpu" || name.rfind("cuda", 0) == 0, "unknown device '", name, "' (expected cpu or cuda)");
  // The launch environment is read only for plain "cuda": a CPU run never depends on it.
  const Device d = name == "cuda" ? Device::cuda(rank_cuda_index(distributed::read_launch_env())) : Device::parse(name);
  check_device_available(d, name);
  return d;
}

Tensor DataShard::rows(const Tensor& batch) const {
  if (weights.empty()) return batch;
  const std::vector<int64_t> sizes = distributed::DistributedSampler::split(batch.size(0), weights);
  // Every rank splits the same batch the same way, so every rank stops here together, before any
  // rank computes on no rows and the others wait for it.
  for (size_t r = 0; r < sizes.size(); ++r) {
    if (sizes[r] > 0) continue;
    std::ostringstream w;
    for (size_t k = 0; k < weights.size(); ++k) w << (k ? "," : "") << weights[k];
    MT_ERROR("data parallel: a global batch of ", batch.size(0), " rows split over ", sizes.size(),
             " ranks by weights ", w.str(), " gives rank ", r, " no rows; use a global batch of at least one row ",
             "per rank (", sizes.size(), "), or weights closer together");
  }
  int64_t begin = 0;
  for (int r = 0; r < rank; ++r) begin += sizes[static_cast<size_t>(r)];
  return batch.narrow(0, begin, sizes[static_cast<size_t>(rank)]).contiguous();
}

void TrainTask::seek_batches(int64_t) {
  MT_ERROR("this trainer (", describe(), ") cannot move its data stream back (TrainTask::seek_batches), which ",
           "elastic training needs to redo a step on its batch; train it with mixtrain launch --max-restarts instead");
}

void TrainTask::seek_stream(int64_t n, data::DataLoader* loader, const nlohmann::json& start, size_t& next) {
  MT_CHECK(n >= 0, "seek_batches: negative batch count ", n);
  if (!loader) {
    next = static_cast<size_t>(n);
    return;
  }
  loader->load_state_dict(start);  // where it stood before the first batch
  loader->skip(n);
}

data::DataLoaderOptions TrainTask::training_loader_options(int64_t batch_size, Device device) {
  return data::DataLoaderOptions().batch_size(batch_size).num_workers(1).device(device).pin_memory(device.is_cuda());
}

std::vector<int64_t> TrainTask::shapes_key(std::initializer_list<Tensor> tensors) {
  std::vector<int64_t> key;
  for (const Tensor& t : tensors) {
    for (int64_t d : t.shape()) key.push_back(d);
    key.push_back(-1);
  }
  return key;
}

int64_t parameter_count(const nn::Module& model) {
  int64_t n = 0;
  for (const auto& p : model.parameters()) n += p.numel();
  return n;
}

TrainResult train_with_log(TrainTask& task, const TrainOptions& options, std::ostream* log, int64_t log_every) {
  double window = 0;
  int64_t in_window = 0;
  auto last = std::chrono::steady_clock::now();
  return train(task, options, [&](const StepRecord& r) {
    window += r.loss;
    ++in_window;
    if (!log || log_every <= 0) return;
    if (r.step != 1 && r.step % log_every != 0 && r.step != options.steps) return;
    const auto now = std::chrono::steady_clock::now();
    const double secs = std::chrono::duration<double>(now - last).count();
    last = now;
    *log << "step " << std::setw(6) << r.step << "  loss " << std::fixed << std::setprecision(4)
         << window / static_cast<double>(in_window) << "  scale " << std::defaultfloat << r.scale << "  ("
         << std::fixed << std::setprecision(1) << static_cast<double>(in_window) / std::max(secs, 1e-9)
         << " steps/s)" << std::defaultfloat << std::endl;
    window = 0;
    in_window = 0;
  });
}


// The one encoding of a step's record: non-finite numbers are written as null (JSON has no NaN)
// and read back as NaN.
nlohmann::json step_record_json(const StepRecord& r) {
  const auto number = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); };
  nlohmann::json j = {{"step", r.step},       {"lr", r.lr},          {"loss", number(r.loss)},
                      {"scale", r.scale},     {"skipped", r.skipped}, {"grad_norm", number(r.grad_norm)},
                      {"seconds", r.seconds}};
  if (!r.rank_rows.empty()) j["rank_rows"] = r.rank_rows;  // data parallel: every rank's share
  return j;
}

StepRecord step_record_from_json(const nlohmann::json& j) {
  StepRecord r;
  if (j.is_null()) return r;
  const auto number = [&](const char* key) {
    const nlohmann::json& v = j.at(key);
    return v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>();
  };
  try {
    r.step = j.at("step").get<int64_t>();
    r.lr = j.at("lr").get<double>();
    r.loss = number("loss");
    r.scale = j.at("scale").get<double>();
    r.skipped = j.at("skipped").get<bool>();
    r.grad_norm = number("grad_norm");
    r.seconds = j.value("seconds", 0.0);
    if (j.contains("rank_rows")) r.rank_rows = j.at("rank_rows").get<std::vector<int64_t>>();
  } catch (const nlohmann::json::exception& e) {
    MT_ERROR("a step record (", j.dump().substr(0, 200), ") is malformed: ", e.what());
  }
  return r;
}

}  // namespace mixtrain::train
