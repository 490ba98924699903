// mixtrain bench: each model in fp32 and under AMP (fp16 with loss scaling, bf16) on synthetic
// data pre-generated on the device; median step time after warm-up, throughput, speedup over
// fp32, peak memory beside the dry run's predicted peak and planned arena, final loss. Printed
// as a table, written as bench.json and bench.svg.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <mixtrain/mixtrain.h>

#include "bench_prediction.h"
#include "bench_report.h"
#include "cpu_autocast.h"
#include "commands.h"
#include "common/cli.h"
#include "tasks.h"

namespace mixtrain::cli {

namespace {

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) return line.substr(line.find(':') + 2);
  return "cpu";
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

nlohmann::json load_reference(const std::string& path) {
  // A report is a few kilobytes; the bounded reader refuses a FIFO or a device at once.
  const std::string text = read_file(path, "--reference", uint64_t{64} << 20);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error("--reference: " + path + " is not JSON: " + e.what());
  }
  check_bench_json(doc, "--reference " + path);
  return doc;
}

// One model at one precision: a fresh task (same seed, so every precision starts from the same
// weights and data), warm-up steps, then the timed ones. loss.item() at the end of every step
// waits for the device, so each step's wall time is its device time too.
nlohmann::json bench_one(const TaskSpec& spec, train::Precision precision, int64_t warmup, int64_t steps) {
  memory::empty_cache(spec.device);  // reserved memory is then this run's own
  auto task = make_task(spec);
  train::TrainOptions o;
  o.precision = precision;
  o.device = spec.device;
  o.steps = warmup + steps;
  o.lr = default_lr(spec.model);
  o.constant_lr = true;
  const train::TrainResult r = train::train(*task, o);
  std::vector<double> times;
  for (size_t i = static_cast<size_t>(warmup); i < r.records.size(); ++i) times.push_back(r.records[i].seconds);
  const double step_s = median(times);
  const int64_t skipped = std::count_if(r.records.begin() + warmup, r.records.end(),
                                        [](const train::StepRecord& s) { return s.skipped; });
  return {{"model", spec.model},
          {"precision", train::precision_name(precision)},
          {"parameters", train::parameter_count(task->model())},
          {"batch_size", task->batch_size()},
          {"median_step_ms", step_s * 1e3},
          {"samples_per_s", static_cast<double>(task->batch_size()) / step_s},
          {"speedup_vs_fp32", 1.0},
          {"peak_allocated_bytes", r.memory.peak_allocated_bytes},
          {"peak_reserved_bytes", r.memory.peak_reserved_bytes},
          {"final_loss", r.records.back().loss},
          {"skipped_steps", skipped},
          {"predicted_peak_bytes", nullptr},
          {"plan_arena_bytes", nullptr}};
}

// The dry run's prediction and planned arena into a row (null, with the reason on stderr, when
// the dry run cannot take the step).
void add_prediction(nlohmann::json& row, const TaskSpec& spec, train::Precision precision) {
  try {
    const StepMemoryPrediction p = predict_step_memory(spec, precision, default_lr(spec.model));
    row["predicted_peak_bytes"] = p.peak_bytes;
    row["plan_arena_bytes"] = p.plan_arena_bytes;
  } catch (const std::exception& e) {
    std::cerr << "note: no memory prediction for " << spec.model << " " << train::precision_name(precision)
              << ": " << e.what() << "\n";
  }
}

// The output directory must take files before minutes of benchmarking: created, then probed.
void check_output_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error("--out: cannot create " + dir + ": " + ec.message());
  const std::string probe = dir + "/.mixtrain-probe";
  if (!std::ofstream(probe)) throw std::runtime_error("--out: cannot write files in " + dir);
  std::filesystem::remove(probe, ec);
}

}  // namespace

int run_bench(const std::vector<std::string>& argv) {
  namespace flags = examples::cli;
  std::vector<std::string> models = {"mlp", "unet", "transformer"}, precision_names = {"fp32", "fp16", "bf16"};
  std::string fp32_math = "default", size = "tiny", out_dir = "mixtrain-bench", reference_path;
  int64_t steps = 20, warmup = 3;
  TaskSpec spec;
  spec.device = train::default_device();
  const auto app = flags::make_app("mixtrain bench", "Each model in fp32 and under AMP on synthetic data: median step "
                                                     "time, samples/s, speedup, peak memory, final loss.");
  app->add_option("--models", models, "the models to run")
      ->delimiter(',')
      ->check(flags::one_of({"mlp", "unet", "transformer"}))
      ->type_name("M1,M2")
      ->default_str("mlp,unet,transformer");
  // A subset (e.g. --precisions fp16 under a profiler); the speedup column needs fp32 first.
  app->add_option("--precisions", precision_names, "the precisions to run (the speedup needs fp32 first)")
      ->delimiter(',')
      ->check(flags::one_of({"fp32", "fp16", "bf16", "fp8"}))
      ->type_name("P1,P2")
      ->default_str("fp32,fp16,bf16");
  flags::add_device_flag(*app, spec.device);
  app->add_option("--steps", steps, "timed steps per run")->check(flags::integer_at_least(1))->type_name("N");
  app->add_option("--warmup", warmup, "untimed steps first")->check(flags::integer_at_least(0))->type_name("N");
  app->add_option("--size", size,
                  "model sizes: tiny (seconds on a CPU), small (CPU-sized: the GEMMs and convolutions dominate) "
                  "or full (the Spell benchmark's)")
      ->check(flags::one_of({"tiny", "small", "full"}))
      ->type_name("tiny|small|full");
  app->add_option("--out", out_dir, "where bench.json and bench.svg go (checked before running)")->type_name("DIR");
  app->add_option("--reference", reference_path, "results of bench/reference/torch_amp_bench.py to show beside ours")
      ->type_name("FILE.json")
      ->default_str("none");
  // Which fp32 the baseline is: PyTorch's defaults (cuDNN convolutions on TF32 tensor cores,
  // matmuls in strict fp32), or strict fp32 everywhere. The AMP speedup depends on it.
  app->add_option("--fp32-math", fp32_math, "the fp32 baseline: default (PyTorch's: TF32 convolutions) or strict")
      ->check(flags::one_of({"default", "strict"}))
      ->type_name("default|strict");
  app->add_flag("--channels-last", spec.channels_last, "the UNet in NHWC");
  // Which ops autocast lowers: on the CPU, PyTorch's own lists (bench/reference's torch.autocast)
  // leave norms and activations in the input's type, where mixtrain's default lists widen them.
  std::string cpu_autocast = "cuda";
  app->add_option("--cpu-autocast", cpu_autocast,
                  "the autocast lists: cuda (mixtrain's, as on a GPU) or pytorch (torch's CPU lists)")
      ->check(flags::one_of(cpu_autocast_presets()))
      ->type_name("cuda|pytorch");
  if (!flags::parse(*app, argv, std::cout)) return 0;
  if (cpu_autocast != "cuda" && !spec.device.is_cpu())
    throw std::runtime_error("--cpu-autocast " + cpu_autocast + " is for CPU runs, not --device " + spec.device.str());
  apply_cpu_autocast_preset(cpu_autocast);
  std::vector<train::Precision> precisions;
  for (const auto& name : precision_names) precisions.push_back(train::parse_precision(name));
  cuda::set_allow_tf32(false);
  cuda::set_cudnn_allow_tf32(fp32_math == "default");
  spec.synthetic = true;
  spec.size = parse_task_size(size);
  nlohmann::json reference;
  if (!reference_path.empty()) reference = load_reference(reference_path);
  check_output_dir(out_dir);

  nlohmann::json doc = {{"framework", "mixtrain"},
                        {"framework_version", "0.1.0"},
                        {"device", spec.device.str()},
                        {"device_name", spec.device.is_cpu() ? cpu_name() : spec.device.str()},
                        {"size", task_size_name(spec.size)},
                        {"fp32_math", fp32_math},
                        {"channels_last", spec.channels_last},
                        {"cpu_autocast", cpu_autocast},
                        {"steps", steps},
                        {"warmup", warmup},
                        {"results", nlohmann::json::array()}};
  for (const auto& model : models) {
    spec.model = model;
    double fp32_ms = 0;
    for (train::Precision p : precisions) {
      std::cout << model << " " << train::precision_name(p) << ": " << std::flush;
      nlohmann::json row = bench_one(spec, p, warmup, steps);
      add_prediction(row, spec, p);
      const double ms = row["median_step_ms"].get<double>();
      if (p == train::Precision::Fp32) fp32_ms = ms;
      row["speedup_vs_fp32"] = fp32_ms > 0 ? fp32_ms / ms : 0.0;
      std::cout << std::fixed << std::setprecision(2) << ms << " ms/step, final loss "
                << row["final_loss"].get<double>() << std::defaultfloat << "\n";
      doc["results"].push_back(row);
    }
  }

  std::cout << "\n";
  print_bench_table(std::cout, doc, reference.is_null() ? nullptr : &reference);
  std::filesystem::create_directories(out_dir);
  const std::string json_path = out_dir + "/bench.json", svg_path = out_dir + "/bench.svg";
  std::ofstream(json_path) << doc.dump(2) << "\n";
  std::ofstream(svg_path) << bench_svg(doc, reference.is_null() ? nullptr : &reference);
  std::cout << "wrote " << json_path << " and " << svg_path << "\n";
  return 0;
}

}  // namespace mixtrain::cli
