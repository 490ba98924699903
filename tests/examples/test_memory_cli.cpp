// `mixtrain memory`: the predicted step memory as JSON (keys, their relations, prediction against
// a measured real step), --fit's batch search, --timeline's SVG and usage errors; and the arena
// layout and size parsing behind it.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/cli.h"
#include "memory_predict.h"
#include "examples/cli_run.h"
#include "support/testing.h"

namespace mt = mixtrain;
namespace cli = mixtrain::cli;

namespace {

using mixtrain::testing::CliRun;
using mixtrain::testing::run_mixtrain;
using mixtrain::testing::slurp;

nlohmann::json run_json(const std::string& args) {
  const CliRun r = run_mixtrain(args + " --json");
  EXPECT_EQ(r.code, 0) << args << ": " << r.err;
  return r.code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
}

// No two buffers live at the same time share a byte; the arena holds every buffer.
void expect_valid_layout(const std::vector<mt::memory::BufferLifetime>& b, const cli::ArenaLayout& layout) {
  ASSERT_EQ(layout.offsets.size(), b.size());
  for (size_t i = 0; i < b.size(); ++i) {
    ASSERT_GE(layout.offsets[i], 0);
    ASSERT_LE(layout.offsets[i] + static_cast<int64_t>(b[i].bytes), layout.bytes);
    for (size_t j = i + 1; j < b.size(); ++j) {
      const bool live_together = b[i].alloc_at < b[j].free_at && b[j].alloc_at < b[i].free_at;
      const bool share_bytes = layout.offsets[i] < layout.offsets[j] + static_cast<int64_t>(b[j].bytes) &&
                               layout.offsets[j] < layout.offsets[i] + static_cast<int64_t>(b[i].bytes);
      ASSERT_FALSE(live_together && share_bytes) << "buffers " << i << " and " << j;
    }
  }
}

int64_t most_live(const std::vector<mt::memory::BufferLifetime>& b, int64_t events) {
  int64_t peak = 0;
  for (int64_t t = 0; t < events; ++t) {
    int64_t live = 0;
    for (const auto& x : b)
      if (x.alloc_at <= t && t < x.free_at) live += static_cast<int64_t>(x.bytes);
    peak = std::max(peak, live);
  }
  return peak;
}

}  // namespace

TEST(MemoryArena, RandomLifetimesGetDisjointOffsetsNoSmallerThanTheLowerBound) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<mt::memory::BufferLifetime> b;
    const int64_t events = 200;
    for (int i = 0; i < 60; ++i) {
      const int64_t a = static_cast<int64_t>(rng() % (events - 1));
      b.push_back({512 * (1 + rng() % 64), a, a + 1 + static_cast<int64_t>(rng() % (events - a - 1) + 0)});
    }
    const cli::ArenaLayout layout = cli::arena_layout(b);
    expect_valid_layout(b, layout);
    EXPECT_GE(layout.bytes, most_live(b, events));
    EXPECT_EQ(cli::arena_bytes(b), layout.bytes);
  }
  // Buffers that never live together share one slot.
  const std::vector<mt::memory::BufferLifetime> chain = {{1024, 0, 1}, {1024, 1, 2}, {512, 2, 3}};
  EXPECT_EQ(cli::arena_layout(chain).bytes, 1024);
  EXPECT_EQ(cli::arena_layout({}).bytes, 0);
}

TEST(MemoryArena, TinyTransformerTraceIsPlannedWithoutOverlap) {
  cli::StepQuery q;
  q.spec.model = "transformer";
  q.spec.size = cli::TaskSize::Tiny;
  q.precision = mt::train::Precision::Bf16;
  const cli::StepPrediction p = cli::predict_step(q);
  const auto buffers = p.trace.lifetimes();
  ASSERT_GT(buffers.size(), 10u);
  const cli::ArenaLayout layout = cli::arena_layout(buffers);
  expect_valid_layout(buffers, layout);
  EXPECT_GE(layout.bytes, p.lower_bound_bytes);
  EXPECT_LE(static_cast<double>(layout.bytes), 1.25 * static_cast<double>(p.lower_bound_bytes));
}

// A bad size given to a flag is a usage error (exit 2) naming the flag; memory::parse_bytes decides
// what a size is (tests/memory/test_step_fit.cpp).
TEST(MemoryCli, ByteSizesParseStrictlyAndErrorsNameTheFlag) {
  EXPECT_EQ(cli::parse_byte_size("8GiB", "--fit"), int64_t{8} << 30);
  for (const char* bad : {"", "8 GiB", "0"}) {
    try {
      cli::parse_byte_size(bad, "--fit");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const mixtrain::examples::cli::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--fit"), std::string::npos) << e.what();
    }
  }
}

// The prediction against a real CPU step (the second, after one warm-up), for each model, fp32
// and bf16 at the tiny presets.
TEST(MemoryCli, JsonHasTheKeysAndThePeakMatchesTheMeasuredStep) {
  for (const std::string model : {"mlp", "unet", "transformer"}) {
    for (const std::string precision : {"fp32", "bf16", "fp8"}) {
      SCOPED_TRACE(model + " " + precision);
      const nlohmann::json j = run_json("memory " + model + " --precision " + precision + " --device cpu --measure");
      for (const char* key : {"peak_bytes", "persistent_bytes", "activation_bytes", "plan_arena_bytes",
                              "lower_bound_bytes", "reserved_bytes", "measured_peak_bytes",
                              "measured_peak_reserved_bytes", "peak_by_role", "batch_size"})
        ASSERT_TRUE(j.contains(key)) << key << " missing from " << j.dump();
      const int64_t peak = j["peak_bytes"], persistent = j["persistent_bytes"], lower = j["lower_bound_bytes"],
                    arena = j["plan_arena_bytes"], measured = j["measured_peak_bytes"],
                    activations = j["activation_bytes"], reserved = j["reserved_bytes"];
      std::printf("%s %s: predicted %ld, measured %ld; reserved %ld, measured %ld; arena %ld, lower bound %ld\n",
                  model.c_str(), precision.c_str(), long(peak), long(measured), long(reserved),
                  long(j["measured_peak_reserved_bytes"].get<int64_t>()), long(arena), long(lower));
      EXPECT_GE(peak, persistent);
      EXPECT_GT(persistent, 0);
      EXPECT_GT(activations, 0);
      EXPECT_LE(lower, arena);
      EXPECT_LE(lower, peak);
      EXPECT_GE(reserved, peak);
      EXPECT_NEAR(static_cast<double>(peak), static_cast<double>(measured), 0.01 * static_cast<double>(measured));
      int64_t by_role = 0;
      for (const auto& [role, bytes] : j["peak_by_role"].items()) by_role += bytes.get<int64_t>();
      EXPECT_EQ(by_role, peak);
      // FP8: the scaling state of the converted Linear layers is part of every instant (the UNet has none).
      const bool fp8_layers = precision == "fp8" && model != "unet";
      EXPECT_EQ(j["peak_by_role"]["fp8_state"].get<int64_t>() > 0, fp8_layers) << j["peak_by_role"].dump();
    }
  }
}

TEST(MemoryCli, CudaTargetIsPlannedWithoutAGpu) {
  const nlohmann::json cpu = run_json("memory transformer --device cpu --precision fp16");
  const nlohmann::json cuda = run_json("memory transformer --device cuda --precision fp16");
  ASSERT_TRUE(cuda.contains("peak_bytes"));
  EXPECT_EQ(cuda["device"], "cuda:0");
  // The cuBLASLt workspace (32 MiB, held by the context) is part of a CUDA step's memory.
  EXPECT_GE(cuda["peak_bytes"].get<int64_t>(), cpu["peak_bytes"].get<int64_t>());
  EXPECT_GE(cuda["persistent_bytes"].get<int64_t>(), int64_t{32} << 20);
}

TEST(MemoryCli, FitFindsTheLargestBatchWhoseReservedBytesFit) {
  // The limit a device meets is the caching allocator's reserve: a batch fits when its predicted
  // reserved bytes do, and the answer says which figure stopped the next batch.
  const nlohmann::json at64 = run_json("memory mlp --batch-size 64");
  const int64_t limit = at64["reserved_bytes"].get<int64_t>();
  const nlohmann::json fit = run_json("memory mlp --fit " + std::to_string(limit));
  const int64_t batch = fit["fit_batch_size"];
  EXPECT_GE(batch, 64);
  EXPECT_EQ(fit["batch_size"], batch);
  EXPECT_LE(fit["reserved_bytes"].get<int64_t>(), limit);
  EXPECT_LE(fit["peak_bytes"].get<int64_t>(), limit);
  EXPECT_EQ(fit["fit_over_batch_size"].get<int64_t>(), batch + 1);
  EXPECT_GT(fit["fit_over_reserved_bytes"].get<int64_t>(), limit);
  EXPECT_EQ(fit["fit_binds"], fit["fit_over_peak_bytes"].get<int64_t>() > limit ? "allocated" : "reserved");
  // The next batch, asked for directly, does not fit.
  EXPECT_GT(run_json("memory mlp --batch-size " + std::to_string(batch + 1))["reserved_bytes"].get<int64_t>(), limit);
  // The table form says the same, with both figures.
  const CliRun table = run_mixtrain("memory mlp --fit " + std::to_string(limit));
  EXPECT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("batch " + std::to_string(batch) + " is the largest whose reserved bytes fit"), std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find("batch " + std::to_string(batch + 1) + " would reserve"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find(" binds"), std::string::npos) << table.out;
}

// --fit never calls a batch fitting whose reserved estimate exceeds the budget, even where the
// allocated peak alone would fit: the full transformer on a CUDA target at the README's 8 GiB.
TEST(MemoryCli, FitKeepsTheReservedEstimateWithinTheBudget) {
  const int64_t limit = int64_t{8} << 30;
  const nlohmann::json fit = run_json("memory transformer --size full --precision fp16 --device cuda --fit 8GiB");
  const int64_t batch = fit["fit_batch_size"];
  EXPECT_LE(fit["reserved_bytes"].get<int64_t>(), limit);
  EXPECT_GT(fit["fit_over_reserved_bytes"].get<int64_t>(), limit);
  EXPECT_EQ(fit["fit_over_batch_size"].get<int64_t>(), batch + 1);
  const nlohmann::json next =
      run_json("memory transformer --size full --precision fp16 --device cuda --batch-size " + std::to_string(batch + 1));
  EXPECT_GT(next["reserved_bytes"].get<int64_t>(), limit);
}

// Models built for a dry run skip their weight initialisation (nn::init::SkipInitGuard): the
// trace, event by event, and the fit search's answer are those of a build with real weights.
void expect_same_trace(const mt::memory::MemoryTrace& a, const mt::memory::MemoryTrace& b) {
  ASSERT_EQ(a.events.size(), b.events.size());
  ASSERT_GT(a.events.size(), 10u);
  std::map<int64_t, int64_t> ids_a, ids_b;  // buffer ids in order of first appearance
  for (size_t i = 0; i < a.events.size(); ++i) {
    const mt::memory::MemoryEvent &x = a.events[i], &y = b.events[i];
    SCOPED_TRACE("event " + std::to_string(i) + " (" + x.op + ")");
    EXPECT_EQ(x.kind, y.kind);
    EXPECT_EQ(x.bytes, y.bytes);
    EXPECT_EQ(x.requested, y.requested);
    EXPECT_EQ(x.role, y.role);
    EXPECT_EQ(x.phase, y.phase);
    EXPECT_EQ(std::string(x.op), std::string(y.op));
    EXPECT_EQ(x.before_step, y.before_step);
    const int64_t id_a = ids_a.emplace(x.buffer, static_cast<int64_t>(ids_a.size())).first->second;
    const int64_t id_b = ids_b.emplace(y.buffer, static_cast<int64_t>(ids_b.size())).first->second;
    EXPECT_EQ(id_a, id_b);
  }
  EXPECT_EQ(a.assumptions, b.assumptions);
}

TEST(MemoryCli, UninitialisedMetaBuildPredictsAsTheInitialisedOne) {
  struct Case {
    const char* model;
    mt::train::Precision precision;
    mt::Device target;
    bool checkpoint;
  };
  for (const Case& c : {Case{"mlp", mt::train::Precision::Fp32, mt::Device::cpu(), false},
                        Case{"unet", mt::train::Precision::Bf16, mt::Device::cpu(), true},
                        Case{"transformer", mt::train::Precision::Fp16, mt::Device::cuda(0), false},
                        Case{"transformer", mt::train::Precision::Bf16, mt::Device::cpu(), true}}) {
    SCOPED_TRACE(std::string(c.model) + " on " + c.target.str() + (c.checkpoint ? ", checkpointed" : ""));
    cli::StepQuery fast;
    fast.spec.model = c.model;
    fast.spec.size = cli::TaskSize::Tiny;
    fast.spec.checkpoint_activations = c.checkpoint;
    fast.precision = c.precision;
    fast.target = c.target;
    cli::StepQuery initialised = fast;
    initialised.initialise_weights = true;
    const cli::StepPrediction a = cli::predict_step(fast), b = cli::predict_step(initialised);
    expect_same_trace(a.trace, b.trace);
    EXPECT_EQ(a.peak_bytes, b.peak_bytes);
    EXPECT_EQ(a.persistent_bytes, b.persistent_bytes);
    EXPECT_EQ(mixtrain::memory::replay_reserved_bytes(a.trace), mixtrain::memory::replay_reserved_bytes(b.trace));
    // The fit search, at a limit a few batches above the preset's.
    EXPECT_EQ(a.reserved_bytes, b.reserved_bytes);
    const int64_t limit = a.reserved_bytes + 3 * (a.activation_bytes / std::max<int64_t>(a.batch_size, 1));
    const cli::FitResult fa = cli::fit_batch(fast, limit), fb = cli::fit_batch(initialised, limit);
    ASSERT_TRUE(fa.fits);
    EXPECT_EQ(fa.best.batch_size, fb.best.batch_size);
    EXPECT_EQ(fa.best.peak_bytes, fb.best.peak_bytes);
    EXPECT_EQ(fa.over_batch, fb.over_batch);
    EXPECT_EQ(fa.over_peak_bytes, fb.over_peak_bytes);
    EXPECT_EQ(fa.over_reserved_bytes, fb.over_reserved_bytes);
    EXPECT_EQ(fa.dry_runs, fb.dry_runs);
  }
}

TEST(MemoryCli, FitSmallerThanThePersistentBytesSaysSo) {
  const CliRun r = run_mixtrain("memory unet --fit 1KiB");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("1KiB (1024 B)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("persistent"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(MemoryCli, UsageErrorsExitWith2NamingTheFlag) {
  for (const auto& [args, named] : std::vector<std::pair<std::string, std::string>>{
           {"memory resnet", "resnet"},
           {"memory", "model"},
           {"memory mlp --fit 8XB", "--fit"},
           {"memory mlp --fit 0", "--fit"},
           {"memory mlp --fit", "--fit"},
           {"memory mlp --precision fp4", "--precision"},
           {"memory mlp --device tpu", "--device"},
           {"memory mlp --batch-size 0", "--batch-size"},
           {"memory mlp --size huge", "--size"},
           {"memory mlp --bogus", "--bogus"},
           {"memory mlp --timeline /nonexistent/dir/t.svg", "--timeline"}}) {
    SCOPED_TRACE(args);
    const CliRun r = run_mixtrain(args);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find(named), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

TEST(MemoryCli, TimelineIsAWellFormedSvgWithPhasesAndTheArena) {
  const std::string path = ::testing::TempDir() + "memory_timeline_" + std::to_string(::getpid()) + ".svg";
  const CliRun r = run_mixtrain("memory unet --precision fp16 --timeline " + path);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string svg = slurp(path);
  std::remove(path.c_str());
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  const auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = svg.find(what); at != std::string::npos; at = svg.find(what, at + 1)) ++n;
    return n;
  };
  // Each phase change is marked (zero_grad and clipping make more than three).
  EXPECT_GE(count("class=\"phase\""), 3u);
  for (const char* phase : {">forward<", ">backward<", ">optimizer<"}) EXPECT_NE(svg.find(phase), std::string::npos) << phase;
  EXPECT_EQ(count("class=\"big-label\""), 5u);
  EXPECT_GT(count("class=\"buffer\""), 10u);
  EXPECT_EQ(count("<text"), count("</text>"));
  EXPECT_EQ(count("<svg"), 1u);
}

namespace {
double attribute(const std::string& element, const std::string& name) {
  const size_t at = element.find(" " + name + "=\"");
  EXPECT_NE(at, std::string::npos) << name << " missing in " << element;
  return at == std::string::npos ? 0 : std::stod(element.substr(at + name.size() + 3));
}
}  // namespace

// The phases read in the order they ran (the gradients zeroed, forward, backward, then the
// optimizer: unscale, clipping and the step), each label in a box inside the picture and clear
// of the others, and the picture ends below its last text.
TEST(MemoryCli, TimelinePhaseLabelsReadInOrderInsideThePicture) {
  for (const char* precision : {"fp32", "fp16"}) {
    SCOPED_TRACE(precision);
    const std::string path = ::testing::TempDir() + "memory_phases_" + std::to_string(::getpid()) + ".svg";
    const CliRun r = run_mixtrain(std::string("memory unet --precision ") + precision + " --timeline " + path);
    ASSERT_EQ(r.code, 0) << r.err;
    const std::string svg = slurp(path);
    std::remove(path.c_str());
    const std::string head = svg.substr(0, svg.find('>'));
    const double width = attribute(head, "width"), height = attribute(head, "height");
    std::vector<std::string> labels;
    struct Box {
      double x, y, w, h;
    };
    std::vector<Box> boxes;
    for (size_t at = svg.find("<rect class=\"phase-label-box\""); at != std::string::npos;
         at = svg.find("<rect class=\"phase-label-box\"", at + 1)) {
      const std::string rect = svg.substr(at, svg.find("/>", at) - at);
      boxes.push_back({attribute(rect, "x"), attribute(rect, "y"), attribute(rect, "width"), attribute(rect, "height")});
      const size_t text = svg.find("class=\"phase-label\"", at);
      const size_t open = svg.find('>', text) + 1;
      labels.push_back(svg.substr(open, svg.find("</text>", open) - open));
    }
    EXPECT_EQ(labels, (std::vector<std::string>{"zero_grad", "forward", "backward", "optimizer"}));
    for (size_t i = 0; i < boxes.size(); ++i) {
      const Box& b = boxes[i];
      EXPECT_GE(b.x, 0) << labels[i];
      EXPECT_GE(b.y, 0) << labels[i];
      EXPECT_LE(b.x + b.w, width) << labels[i];
      EXPECT_LE(b.y + b.h, height) << labels[i];
      // Wide enough for its text at 11 px (no glyph past the box).
      EXPECT_GE(b.w, 6.0 * static_cast<double>(labels[i].size())) << labels[i];
      for (size_t j = 0; j < i; ++j) {
        const Box& o = boxes[j];
        EXPECT_TRUE(b.x >= o.x + o.w || o.x >= b.x + b.w || b.y >= o.y + o.h || o.y >= b.y + b.h)
            << labels[i] << " covers " << labels[j];
      }
    }
    // No dead space: the lowest text (the arena's axis title) is near the bottom edge.
    double lowest = 0;
    for (size_t at = svg.find("<text"); at != std::string::npos; at = svg.find("<text", at + 1))
      lowest = std::max(lowest, attribute(svg.substr(at, svg.find('>', at) - at), "y"));
    EXPECT_LE(lowest, height);
    EXPECT_GT(lowest, height - 20) << "empty space below the last text";
  }
}
