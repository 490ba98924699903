// Checkpoints: resuming is bit-exact (parameters, optimizer state, scaler state, RNG, losses);
// truncated, edited or mismatched checkpoints are rejected with nothing loaded; a failure
// mid-save leaves the previous checkpoint intact.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "io/checkpoint_internal.h"
#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
namespace fs = std::filesystem;
using mt::Tensor;
using mt::testing::bytes_of;
using mt::testing::expect_error;

namespace {

// A tiny fp16 MLP with an fp32 buffer, as named tensors (what an nn::Module hands over).
struct Trainer {
  mt::io::NamedTensors model;
  std::unique_ptr<mt::optim::AdamW> opt;
  std::unique_ptr<mt::amp::GradScaler> scaler;
  std::unique_ptr<mt::optim::CosineAnnealingLR> sched;

  explicit Trainer(uint64_t seed, int64_t hidden = 16) {
    mt::Generator gen(seed);  // not the default generator: building must not move its state
    model = {{"0.weight", (mt::randn({8, hidden}, gen) * 0.3).to(mt::kFloat16).detach().set_requires_grad(true)},
             {"0.bias", mt::zeros({hidden}, mt::kFloat16).set_requires_grad(true)},
             {"2.weight", (mt::randn({hidden, 1}, gen) * 0.3).to(mt::kFloat16).detach().set_requires_grad(true)},
             {"norm.running_mean", mt::randn({hidden}, gen)}};
    opt = std::make_unique<mt::optim::AdamW>(std::vector<Tensor>{model[0].second, model[1].second, model[2].second},
                                             mt::optim::AdamWOptions(3e-3).master_weights(true));
    scaler = std::make_unique<mt::amp::GradScaler>(mt::amp::GradScalerOptions().init_scale(1 << 14).growth_interval(3));
    sched = std::make_unique<mt::optim::CosineAnnealingLR>(*opt, 40, 1e-4);
  }

  // One iteration with the canonical loop; data from the default generator, so its state
  // must be restored for a resumed run to see the same batches.
  float step(int i) {
    Tensor x = mt::randn({32, 8}).to(mt::kFloat16);
    Tensor y = mt::randn({32, 1});
    opt->zero_grad();
    Tensor h = mt::relu(mt::matmul(x, model[0].second) + model[1].second);
    Tensor loss = mt::nn::functional::mse_loss(mt::matmul(h, model[2].second).to(mt::kFloat32), y);
    if (i % 7 == 5) loss = loss * 1e7;  // overflowing iterations: skipped steps in the history
    scaler->scale(loss).backward();
    scaler->unscale_(*opt);
    mt::nn::utils::clip_grad_norm_(opt->master_params(), 1.0);
    sched->step(scaler->step(*opt));
    scaler->update();
    return loss.item<float>();
  }
};

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "mt_ckpt_XXXXXX").string();
    path = ::mkdtemp(t.data());
  }
  ~TempDir() { fs::remove_all(path); }
};

// Everything that must match between two trainers, as bytes and JSON.
struct Snapshot {
  std::vector<std::vector<uint8_t>> tensors;
  nlohmann::json json;
  bool operator==(const Snapshot& o) const { return tensors == o.tensors && json == o.json; }
};
Snapshot snapshot(const Trainer& t) {
  Snapshot s;
  for (const auto& [n, x] : t.model) s.tensors.push_back(bytes_of(x));
  for (const auto& [n, x] : t.opt->state_tensors()) s.tensors.push_back(bytes_of(x));
  const mt::GeneratorState rng = mt::default_generator().state();
  s.json = {{"opt", t.opt->state_dict()}, {"scaler", t.scaler->state_dict()}, {"sched", t.sched->state_dict()},
            {"rng", {rng.seed, rng.offset}}};
  return s;
}

void write_bytes(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }
std::string read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

constexpr int kN = 12;

}  // namespace

TEST(Checkpoint, ResumeIsBitExact) {
  TempDir tmp;
  // Straight: 2N iterations.
  mt::manual_seed(1);
  Trainer straight(100);
  std::vector<float> losses;
  for (int i = 0; i < 2 * kN; ++i) losses.push_back(straight.step(i));
  EXPECT_GT(straight.opt->steps_skipped(), 0);

  // N iterations, save, load into fresh objects (other values, other RNG state), N more.
  mt::manual_seed(1);
  Trainer first(100);
  for (int i = 0; i < kN; ++i) ASSERT_EQ(first.step(i), losses[i]);
  mt::io::save_checkpoint((tmp.path / "ckpt/").string(), first.model, *first.opt, *first.scaler, kN,
                          {{"scheduler", first.sched->state_dict()}});
  Trainer resumed(555);
  mt::manual_seed(999);
  nlohmann::json extra;
  EXPECT_EQ(mt::io::load_checkpoint((tmp.path / "ckpt").string(), resumed.model, *resumed.opt, *resumed.scaler, &extra), kN);
  resumed.sched->load_state_dict(extra.at("scheduler"));
  EXPECT_TRUE(snapshot(resumed) == snapshot(first));
  for (int i = kN; i < 2 * kN; ++i) {
    const float l = resumed.step(i);
    EXPECT_EQ(std::memcmp(&l, &losses[i], sizeof l), 0) << "iteration " << i;
  }
  EXPECT_TRUE(snapshot(resumed) == snapshot(straight));
  EXPECT_EQ(resumed.scaler->get_scale(), straight.scaler->get_scale());
  EXPECT_EQ(resumed.scaler->get_growth_tracker(), straight.scaler->get_growth_tracker());
}

// A channels-last model (Module::to(MemoryFormat)) with fp32 master weights: the checkpoint holds
// values in logical order, and loading puts parameters, master weights and optimizer state back
// in the weights' layout, so training resumes bit for bit.
TEST(Checkpoint, ChannelsLastModelResumesBitExact) {
  TempDir tmp;
  auto make = [](mt::nn::Sequential& net, std::unique_ptr<mt::optim::AdamW>& opt) {
    mt::manual_seed(3);
    net = mt::nn::Sequential(mt::nn::Conv2d(mt::nn::Conv2dOptions(3, 6, 3).padding(1)), mt::nn::ReLU(),
                             mt::nn::Conv2d(mt::nn::Conv2dOptions(6, 2, 1)));
    net->to(mt::kFloat16);
    net->to(mt::MemoryFormat::ChannelsLast);
    opt = std::make_unique<mt::optim::AdamW>(net->parameters(), mt::optim::AdamWOptions(1e-2).master_weights(true));
  };
  auto step = [](mt::nn::Sequential& net, mt::optim::AdamW& opt, int i) {
    const Tensor x = mt::testing::random_tensor({2, 3, 5, 5}, mt::kFloat16, 50 + i).contiguous(mt::MemoryFormat::ChannelsLast);
    opt.zero_grad();
    Tensor loss = mt::nn::functional::mse_loss(net->forward(x).to(mt::kFloat32),
                                               mt::testing::random_tensor({2, 2, 5, 5}, mt::kFloat32, 60 + i));
    loss.backward();
    opt.step();
    return loss.item<float>();
  };
  mt::nn::Sequential straight_net = nullptr, first_net = nullptr, resumed_net = nullptr;
  std::unique_ptr<mt::optim::AdamW> straight, first, resumed;
  make(straight_net, straight);
  std::vector<float> losses;
  for (int i = 0; i < 6; ++i) losses.push_back(step(straight_net, *straight, i));
  make(first_net, first);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(step(first_net, *first, i), losses[i]);
  mt::amp::GradScaler scaler(mt::amp::GradScalerOptions().enabled(false));
  mt::io::save_checkpoint((tmp.path / "cl").string(), *first_net, *first, scaler, 3);
  make(resumed_net, resumed);
  EXPECT_EQ(mt::io::load_checkpoint((tmp.path / "cl").string(), *resumed_net, *resumed, scaler), 3);
  for (const auto& [name, t] : resumed->state_tensors())
    if (t.dim() == 4) EXPECT_EQ(t.suggest_memory_format(), mt::MemoryFormat::ChannelsLast) << name;
  EXPECT_EQ(resumed_net->parameters()[0].suggest_memory_format(), mt::MemoryFormat::ChannelsLast);
  for (int i = 3; i < 6; ++i) {
    const float l = step(resumed_net, *resumed, i);
    EXPECT_EQ(std::memcmp(&l, &losses[i], sizeof l), 0) << "iteration " << i;
  }
}

TEST(Checkpoint, DirectoryLayout) {
  TempDir tmp;
  Trainer t(3);
  mt::manual_seed(4);
  t.step(0);
  const fs::path dir = tmp.path / "c";
  mt::io::save_checkpoint(dir.string(), t.model, *t.opt, *t.scaler, 1);
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(tmp.path)) names.insert(e.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"c"}));  // no staging leftovers
  names.clear();
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"model.safetensors", "optimizer.safetensors", "trainer.json"}));
  const auto model = mt::io::load_safetensors((dir / "model.safetensors").string());
  EXPECT_EQ(model.metadata.at("format"), "pt");
  EXPECT_EQ(model.tensors.size(), 4u);
  const auto opt = mt::io::load_safetensors((dir / "optimizer.safetensors").string());
  EXPECT_EQ(opt.tensors.size(), 9u);  // 3 x (master_param, exp_avg, exp_avg_sq)
  const nlohmann::json j = nlohmann::json::parse(read_bytes(dir / "trainer.json"));
  EXPECT_EQ(j["format"], "mixtrain-checkpoint");
  EXPECT_EQ(j["step"], 1);
  EXPECT_EQ(j["scaler"].size(), 5u);
  EXPECT_EQ(j["optimizer"]["type"], "AdamW");
  EXPECT_TRUE(j["rng"].contains("offset"));
}

TEST(Checkpoint, CorruptOrMismatchedCheckpointsAreRejectedWithNothingLoaded) {
  TempDir tmp;
  Trainer src(10);
  mt::manual_seed(2);
  for (int i = 0; i < 4; ++i) src.step(i);
  const fs::path good = tmp.path / "good";
  mt::io::save_checkpoint(good.string(), src.model, *src.opt, *src.scaler, 4);

  Trainer dst(20);
  mt::manual_seed(77);
  dst.step(0);
  const Snapshot before = snapshot(dst);
  int k = 0;
  auto variant = [&](const std::function<void(const fs::path&)>& edit, const std::string& message) {
    const fs::path d = tmp.path / ("v" + std::to_string(k++));
    fs::copy(good, d);
    edit(d);
    SCOPED_TRACE(message);
    expect_error([&] { mt::io::load_checkpoint(d.string(), dst.model, *dst.opt, *dst.scaler); }, message);
    EXPECT_TRUE(snapshot(dst) == before);
  };
  variant([](const fs::path& d) {
    const std::string s = read_bytes(d / "model.safetensors");
    write_bytes(d / "model.safetensors", s.substr(0, s.size() - 1));
  }, "truncated");
  variant([](const fs::path& d) {
    std::string s = read_bytes(d / "optimizer.safetensors");
    s[s.size() - 3] ^= 0x10;
    write_bytes(d / "optimizer.safetensors", s);
  }, "CRC-32");
  auto edit_json = [](const std::function<void(nlohmann::json&)>& f) {
    return [f](const fs::path& d) {
      nlohmann::json j = nlohmann::json::parse(read_bytes(d / "trainer.json"));
      f(j);
      write_bytes(d / "trainer.json", j.dump());
    };
  };
  variant(edit_json([](auto& j) { j["scaler"]["scale"] = -1.0; }), "scale must be > 0");
  variant(edit_json([](auto& j) { j["scaler"]["growth_interval"] = "often"; }), "growth_interval must be an integer");
  variant(edit_json([](auto& j) { j.erase("rng"); }), "missing field \"rng\"");
  variant(edit_json([](auto& j) { j["optimizer"]["param_groups"][0]["lr"] = nullptr; }), "lr must be a number");
  variant(edit_json([](auto& j) { j["step"] = -5; }), "step");
  variant(edit_json([](auto& j) { j["version"] = 9; }), "version 9");
  variant(edit_json([](auto& j) { j["files"]["model.safetensors"]["bytes"] = 1; }), "manifest says 1");
  variant([](const fs::path& d) { write_bytes(d / "trainer.json", "{\"format\": "); }, "not valid JSON");
  variant([](const fs::path& d) { fs::remove(d / "optimizer.safetensors"); }, "cannot open");

  // A consistent checkpoint of a different model: names, shapes and dtypes are checked.
  Trainer wide(30, /*hidden=*/17);
  const fs::path other = tmp.path / "other";
  mt::io::save_checkpoint(other.string(), wide.model, *wide.opt, *wide.scaler, 0);
  expect_error([&] { mt::io::load_checkpoint(other.string(), dst.model, *dst.opt, *dst.scaler); }, "\"0.weight\"");
  mt::io::NamedTensors renamed = dst.model;
  renamed[3].first = "norm.running_var";
  expect_error([&] { mt::io::load_checkpoint(good.string(), renamed, *dst.opt, *dst.scaler); }, "norm.running_var");
  mt::io::NamedTensors retyped = dst.model;
  retyped[3].second = mt::zeros({16}, mt::kFloat64);
  expect_error([&] { mt::io::load_checkpoint(good.string(), retyped, *dst.opt, *dst.scaler); }, "norm.running_mean");
  EXPECT_TRUE(snapshot(dst) == before);
  expect_error([&] { mt::io::load_checkpoint((tmp.path / "absent").string(), dst.model, *dst.opt, *dst.scaler); },
               "no checkpoint directory");
}

TEST(Checkpoint, AFailedSaveLeavesThePreviousCheckpointIntact) {
  TempDir tmp;
  const fs::path dir = tmp.path / "ckpt";
  Trainer t(40);
  mt::manual_seed(5);
  for (int i = 0; i < 3; ++i) t.step(i);
  mt::io::save_checkpoint(dir.string(), t.model, *t.opt, *t.scaler, 3);
  const Snapshot saved = snapshot(t);
  for (int i = 3; i < 6; ++i) t.step(i);

  for (const char* stage : {"model.safetensors", "optimizer.safetensors", "trainer.json", "staged"}) {
    SCOPED_TRACE(stage);
    mt::io::detail::set_save_hook([&](const std::string& s) {
      if (s == stage) throw std::runtime_error("simulated failure");
    });
    EXPECT_THROW(mt::io::save_checkpoint(dir.string(), t.model, *t.opt, *t.scaler, 6), std::runtime_error);
    mt::io::detail::set_save_hook(nullptr);
    EXPECT_FALSE(fs::exists(tmp.path / "ckpt.mixtrain-tmp"));
    Trainer fresh(41);
    EXPECT_EQ(mt::io::load_checkpoint(dir.string(), fresh.model, *fresh.opt, *fresh.scaler), 3);
    fresh.sched->load_state_dict(saved.json["sched"]);
    EXPECT_TRUE(snapshot(fresh) == saved);
    mt::default_generator().set_state({5, 0});
  }
  // A crash that left a staging directory behind does not stop the next save.
  fs::create_directories(tmp.path / "ckpt.mixtrain-tmp");
  write_bytes(tmp.path / "ckpt.mixtrain-tmp" / "model.safetensors", "partial");
  mt::io::save_checkpoint(dir.string(), t.model, *t.opt, *t.scaler, 6);
  EXPECT_FALSE(fs::exists(tmp.path / "ckpt.mixtrain-tmp"));
  Trainer fresh(42);
  EXPECT_EQ(mt::io::load_checkpoint(dir.string(), fresh.model, *fresh.opt, *fresh.scaler), 6);
  // A crash between the two renames of the fallback swap: the old directory is found.
  fs::rename(dir, tmp.path / "ckpt.mixtrain-old");
  EXPECT_EQ(mt::io::load_checkpoint(dir.string(), fresh.model, *fresh.opt, *fresh.scaler), 6);
  mt::io::save_checkpoint(dir.string(), t.model, *t.opt, *t.scaler, 7);
  EXPECT_FALSE(fs::exists(tmp.path / "ckpt.mixtrain-old"));
  EXPECT_EQ(mt::io::load_checkpoint(dir.string(), fresh.model, *fresh.opt, *fresh.scaler), 7);
}

TEST(Checkpoint, RefusesToReplaceADirectoryWithOtherFiles) {
  TempDir tmp;
  Trainer t(50);
  const fs::path dir = tmp.path / "run";
  fs::create_directories(dir);
  write_bytes(dir / "notes.txt", "precious");
  expect_error([&] { mt::io::save_checkpoint(dir.string(), t.model, *t.opt, *t.scaler, 0); }, "notes.txt");
  EXPECT_EQ(read_bytes(dir / "notes.txt"), "precious");
  fs::remove(dir / "notes.txt");
  mt::io::save_checkpoint(dir.string(), t.model, *t.opt, *t.scaler, 0);  // an empty directory is fine
}
