// Sharded checkpoints of ZeroRedundancyOptimizer in real processes: saved by two ranks, each file
// holding only its rank's shard; resumed at two ranks bit for bit as the run that went on, and at
// three and one rank bit for bit as from the gathered checkpoint of the same state (and a whole
// AdamW in one process loads it too); a corrupt, truncated, mismatched or missing shard, or a
// missing index, moments that are not finite (or negative second moments), an index edited (its
// CRC) or lying about a shard's place, a shard of another save or saying it is another rank,
// refused by every rank with nothing changed; a save that fails on one rank leaving the previous
// checkpoint.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "compare.h"
#include "io/checkpoint_dir.h"
#include "io/checkpoint_internal.h"
#include "io/checkpoint_sharded.h"
#include "io/file_util.h"
#include "mixtrain/distributed/zero.h"
#include "mixtrain/io/optimizer_state.h"
#include "mixtrain/mixtrain.h"
#include "ranks.h"
#include "zero_fixture.h"

namespace mt = mixtrain;
namespace dist = mixtrain::distributed;
namespace nn = mixtrain::nn;
namespace fs = std::filesystem;
using mt_dist_test::bit_equal;
using mt_dist_test::Data;
using mt_dist_test::make_mlp;
using mt_dist_test::max_rel_diff;
using mt_dist_test::run_ranks;

namespace {

constexpr int64_t kSteps = 6;  // saved after step 3 (0-based steps 0-2)

const auto kAdamW = mt::optim::AdamWOptions(0.01).weight_decay(0.1);

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// A ZeRO AdamW run on several buckets (so pieces start inside parameters).
struct ZeroRun {
  mt::nn::Sequential model;
  nn::DistributedDataParallel ddp;
  dist::ZeroRedundancyOptimizer zero;
  mt::amp::GradScaler scaler{mt::amp::GradScalerOptions().enabled(false)};
  ZeroRun(std::shared_ptr<dist::ProcessGroup> g, uint64_t seed)
      : model(make_mlp(seed)),
        ddp(model, std::move(g), nn::DistributedDataParallelOptions().first_bucket_mb(0.0005).bucket_cap_mb(0.001)),
        zero(ddp, [](std::vector<mt::optim::ParamGroup> groups) {
          return std::make_unique<mt::optim::AdamW>(std::move(groups), kAdamW);
        }) {}
  void train(const Data& d, int64_t from, int64_t to) {
    const std::vector<double> even(static_cast<size_t>(ddp.group().world_size()), 1.0);
    for (int64_t step = from; step < to; ++step) {
      zero.zero_grad();
      mt_dist_test::backward(ddp, *model, d, step, even, mt::kFloat32);
      zero.step();
    }
  }
};

// One process's AdamW over the whole model, straight through `steps` steps.
std::vector<mt::Tensor> one_process(const Data& d, int64_t steps) {
  auto model = make_mlp(21);
  mt::optim::AdamW opt(model->parameters(), kAdamW);
  for (int64_t step = 0; step < steps; ++step) {
    opt.zero_grad();
    auto [x, y] = d.rows(step, {}, -1);
    mt::nn::functional::mse_loss(model->forward(x), y).backward();
    opt.step();
  }
  return model->parameters();
}

int64_t state_bytes(const mt::optim::Optimizer& opt) {
  int64_t n = 0;
  for (const auto& [name, t] : opt.state_tensors()) n += static_cast<int64_t>(t.nbytes());
  return n;
}

}  // namespace

// Steps 0-2, then the same state saved sharded (MT_SHARDED) and gathered (MT_GATHERED); each
// rank's shard file holds its optimizer's state tensors and nothing else; then steps 3-5, whose
// parameters rank 0 writes to MT_CONTINUED.
MT_SCENARIO(zero_sharded_save) {
  auto g = dist::new_process_group();
  const int r = g->rank(), n = g->world_size();
  const Data d(12, kSteps);
  ZeroRun run(g, 21);
  run.train(d, 0, 3);
  dist::save_sharded_checkpoint(env("MT_SHARDED"), *run.model, run.zero, run.scaler, 3, nlohmann::json::object(), {});
  dist::save_checkpoint(env("MT_GATHERED"), *run.model, run.zero, run.scaler, 3, nlohmann::json::object(), {});
  const fs::path shard = fs::path(env("MT_SHARDED")) / mt::io::detail::shard_file_name(r, n);
  const mt::io::SafetensorsFile file = mt::io::load_safetensors(shard.string());
  const mt::optim::NamedTensors mine = run.zero.optimizer().state_tensors();
  SC_CHECK(file.tensors.size() == mine.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    bool found = false;
    for (const auto& [name, t] : file.tensors)
      if (name == mine[i].first) found = bit_equal({t}, {mine[i].second});
    SC_CHECK(found);
  }
  // Its size: the shard's state (about half the whole model's at two ranks) and a small header.
  int64_t params = 0;
  for (const auto& p : run.model->parameters()) params += p.numel();
  const int64_t whole = 2 * 4 * params, own = state_bytes(run.zero.optimizer());
  const auto bytes = static_cast<int64_t>(fs::file_size(shard));
  SC_CHECK(own < whole * 6 / 10);
  SC_CHECK(bytes >= own && bytes <= own + 4096);
  run.train(d, 3, kSteps);
  if (r == 0) mt::io::save_safetensors(env("MT_CONTINUED"), run.model->named_parameters());
  return 0;
}

// At this world size: MT_SHARDED resumed and trained on, and MT_GATHERED the same way from fresh
// weights; both must end bit for bit alike (and as MT_CONTINUED's run when it is given), and as
// one process to summation order.
MT_SCENARIO(zero_sharded_resume) {
  auto g = dist::new_process_group();
  const Data d(12, kSteps);
  ZeroRun sharded(g, 99), gathered(g, 77);
  SC_CHECK(dist::load_checkpoint(env("MT_SHARDED"), *sharded.model, sharded.zero, sharded.scaler, nullptr, {}) == 3);
  SC_CHECK(dist::load_checkpoint(env("MT_GATHERED"), *gathered.model, gathered.zero, gathered.scaler, nullptr, {}) ==
           3);
  SC_CHECK(bit_equal(sharded.zero.optimizer().master_params(), gathered.zero.optimizer().master_params()));
  const auto a = sharded.zero.optimizer().state_tensors(), b = gathered.zero.optimizer().state_tensors();
  SC_CHECK(a.size() == b.size() && !a.empty());
  for (size_t i = 0; i < a.size(); ++i) SC_CHECK(a[i].first == b[i].first && bit_equal({a[i].second}, {b[i].second}));
  sharded.train(d, 3, kSteps);
  gathered.train(d, 3, kSteps);
  SC_CHECK(bit_equal(sharded.model->parameters(), gathered.model->parameters()));
  if (!env("MT_CONTINUED").empty()) {
    const mt::io::SafetensorsFile continued = mt::io::load_safetensors(env("MT_CONTINUED"));
    std::vector<mt::Tensor> want;
    for (const auto& [name, t] : continued.tensors) want.push_back(t);
    std::vector<mt::Tensor> got;
    for (const auto& [name, t] : continued.tensors)
      for (const auto& [mine, p] : sharded.model->named_parameters())
        if (mine == name) got.push_back(p);
    SC_CHECK(bit_equal(got, want));
  }
  SC_CHECK(max_rel_diff(sharded.model->parameters(), one_process(d, kSteps)) < 2e-6);
  return 0;
}

// MT_SHARDED is damaged: every rank's load throws an Error holding MT_EXPECT, and the model and
// optimizer are as before (and the group still works: a step follows). MT_RANK0_EXPECT: what
// rank 0's Error says besides (that another rank refused it, rank 0 having found nothing).
MT_SCENARIO(zero_sharded_refused) {
  auto g = dist::new_process_group();
  const Data d(12, kSteps);
  ZeroRun run(g, 5);
  run.train(d, 0, 2);
  std::vector<mt::Tensor> before;
  for (const auto& p : run.model->parameters()) before.push_back(p.clone());
  std::vector<mt::Tensor> state_before;
  for (const auto& [n, t] : run.zero.optimizer().state_tensors()) state_before.push_back(t.clone());
  const std::string json_before = run.zero.optimizer().state_dict().dump();
  try {
    dist::load_checkpoint(env("MT_SHARDED"), *run.model, run.zero, run.scaler, nullptr, {});
    std::fprintf(stderr, "the damaged checkpoint was loaded\n");
    return 1;
  } catch (const mt::Error& e) {
    std::fprintf(stderr, "refused: %s\n", e.what());
    SC_CHECK(std::string(e.what()).find(env("MT_EXPECT")) != std::string::npos);
    if (g->rank() == 0) SC_CHECK(std::string(e.what()).find(env("MT_RANK0_EXPECT")) != std::string::npos);
  }
  SC_CHECK(bit_equal(run.model->parameters(), before));
  std::vector<mt::Tensor> state_after;
  for (const auto& [n, t] : run.zero.optimizer().state_tensors()) state_after.push_back(t);
  SC_CHECK(bit_equal(state_after, state_before));
  SC_CHECK(run.zero.optimizer().state_dict().dump() == json_before);
  run.train(d, 2, 3);
  return 0;
}

// A sharded save over MT_SHARDED whose shard write fails on rank 1: every rank throws, naming
// rank 1, and MT_SHARDED still holds the checkpoint of step 3, with no staging left.
MT_SCENARIO(zero_sharded_save_fails) {
  auto g = dist::new_process_group();
  const int n = g->world_size();
  const Data d(12, kSteps);
  ZeroRun run(g, 5);
  run.train(d, 0, 1);
  const std::string shard1 = mt::io::detail::shard_file_name(1, n);
  if (g->rank() == 1)
    mt::io::detail::set_save_hook([&](const std::string& stage) {
      if (stage == shard1) throw mt::Error("disk full (simulated)");
    });
  try {
    dist::save_sharded_checkpoint(env("MT_SHARDED"), *run.model, run.zero, run.scaler, 1, nlohmann::json::object(), {});
    return 1;
  } catch (const mt::Error& e) {
    std::fprintf(stderr, "save failed: %s\n", e.what());
    SC_CHECK(std::string(e.what()).find(g->rank() == 1 ? "disk full" : "rank 1: disk full") != std::string::npos);
  }
  mt::io::detail::set_save_hook(nullptr);
  g->barrier();
  SC_CHECK(!fs::exists(env("MT_SHARDED") + ".mixtrain-tmp"));
  ZeroRun fresh(g, 6);
  SC_CHECK(dist::load_checkpoint(env("MT_SHARDED"), *fresh.model, fresh.zero, fresh.scaler, nullptr, {}) == 3);
  return 0;
}

namespace {

struct Dirs {
  fs::path root;
  std::string sharded, gathered, continued;
  explicit Dirs(const std::string& name = "")
      : root(fs::path(::testing::TempDir()) / ("mt_zero_sharded_" + std::to_string(::getpid()) + name)),
        sharded((root / "sharded").string()),
        gathered((root / "gathered").string()),
        continued((root / "continued.safetensors").string()) {
    fs::remove_all(root);
    fs::create_directories(root);
  }
  ~Dirs() { fs::remove_all(root); }
  std::vector<std::string> env() const {
    return {"MT_SHARDED=" + sharded, "MT_GATHERED=" + gathered, "MT_CONTINUED=" + continued};
  }
};

void expect_passed(const std::vector<mt_dist_test::RankResult>& res, const std::string& what) {
  for (const auto& r : res) ASSERT_EQ(r.exit_code, 0) << what << "\n" << mt_dist_test::describe(res);
}

// Saved by two ranks into d.sharded and d.gathered (and d.continued).
void save_at_two(const Dirs& d) {
  expect_passed(run_ranks("zero_sharded_save", 2, std::chrono::seconds(50), {{-1, d.env()}}), "save at 2");
}

void flip_byte(const fs::path& file, uint64_t from_end) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-static_cast<std::streamoff>(from_end), std::ios::end);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(-static_cast<std::streamoff>(from_end), std::ios::end);
  f.write(&c, 1);
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void edit_trainer_json(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(read_file(dir / "trainer.json"));
  edit(j);
  std::ofstream(dir / "trainer.json", std::ios::binary) << j.dump();
}

// The manifest entry of `name` (its size and CRC-32) made to match the file as it now is.
void refresh_manifest(const fs::path& dir, const std::string& name) {
  const std::string bytes = read_file(dir / name);
  edit_trainer_json(dir, [&](nlohmann::json& j) {
    j["files"][name] = {{"bytes", bytes.size()},
                        {"crc32", mt::io::detail::crc_hex(mt::io::detail::crc32(bytes.data(), bytes.size()))}};
  });
}

// Shard `name` rewritten by `edit` (its tensors and metadata), its manifest entry refreshed.
void rewrite_shard(const fs::path& dir, const std::string& name, const std::function<void(mt::io::SafetensorsFile&)>& edit) {
  mt::io::SafetensorsFile f = mt::io::load_safetensors((dir / name).string());
  edit(f);
  mt::io::save_safetensors((dir / name).string(), f.tensors, f.metadata);
  refresh_manifest(dir, name);
}

// Element 0 of the first "<...>.exp_avg_sq" tensor of the file set to `value`.
std::function<void(mt::io::SafetensorsFile&)> set_exp_avg_sq(float value) {
  return [value](mt::io::SafetensorsFile& f) {
    for (auto& [n, t] : f.tensors)
      if (n.size() > 11 && n.compare(n.size() - 11, 11, ".exp_avg_sq") == 0) {
        t.data_ptr<float>()[0] = value;
        return;
      }
    ADD_FAILURE() << "no exp_avg_sq";
  };
}

// Two pieces of equal length, of different shards, swapped in the index: the shards' moments
// would land on each other's elements. `refresh`: the index's CRC made to match.
void swap_equal_pieces(const fs::path& dir, bool refresh) {
  edit_trainer_json(dir, [&](nlohmann::json& j) {
    nlohmann::json& shards = j["sharded"]["shards"];
    for (auto& a : shards[0]["pieces"])
      for (auto& b : shards[1]["pieces"])
        if (a[2] == b[2]) {
          std::swap(a, b);
          if (refresh) j["sharded"]["crc32"] = mt::io::detail::index_crc(j["sharded"]);
          return;
        }
    ADD_FAILURE() << "no two pieces of one length in " << shards.dump();
  });
}

}  // namespace

TEST(ZeroSharded, EachRankSavesItsShardAndResumesBitExactAtTwoThreeAndOneRanks) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  const Dirs d;
  ASSERT_NO_FATAL_FAILURE(save_at_two(d));
  // The index lists two shards; the directory holds them, the model and the index, nothing else.
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(d.sharded)) names.insert(e.path().filename().string());
  EXPECT_EQ(names,
            (std::set<std::string>{"model.safetensors", "trainer.json", "optimizer-rank-00000-of-00002.safetensors",
                                   "optimizer-rank-00001-of-00002.safetensors"}));
  ASSERT_NO_FATAL_FAILURE(
      expect_passed(run_ranks("zero_sharded_resume", 2, std::chrono::seconds(50), {{-1, d.env()}}), "resume at 2"));
  for (const int world : {3, 1}) {
    std::vector<std::string> env = {"MT_SHARDED=" + d.sharded, "MT_GATHERED=" + d.gathered};
    ASSERT_NO_FATAL_FAILURE(
        expect_passed(run_ranks("zero_sharded_resume", world, std::chrono::seconds(50), {{-1, env}}),
                      "resume at " + std::to_string(world)));
  }
  // A whole AdamW in one process (what the trainers use at world size 1) loads both alike.
  const Data data(12, kSteps);
  std::vector<std::vector<mt::Tensor>> ends;
  for (const std::string& dir : {d.sharded, d.gathered}) {
    auto model = make_mlp(3);
    mt::optim::AdamW opt(model->parameters(), kAdamW);
    mt::amp::GradScaler scaler(mt::amp::GradScalerOptions().enabled(false));
    ASSERT_EQ(mt::io::load_checkpoint(dir, *model, opt, scaler), 3);
    EXPECT_EQ(state_bytes(opt), 2 * 4 * (8 * 48 + 48 + 48 * 40 + 40 + 40 * 3 + 3));
    for (int64_t step = 3; step < kSteps; ++step) {
      opt.zero_grad();
      auto [x, y] = data.rows(step, {}, -1);
      mt::nn::functional::mse_loss(model->forward(x), y).backward();
      opt.step();
    }
    ends.push_back(model->parameters());
  }
  EXPECT_TRUE(bit_equal(ends[0], ends[1]));
}

TEST(ZeroSharded, ADamagedShardOrAMissingIndexIsRefusedByEveryRankWithNothingChanged) {
  if (!dist::gloo_available()) GTEST_SKIP() << dist::unavailable_reason();
  const Dirs d;
  ASSERT_NO_FATAL_FAILURE(save_at_two(d));
  const Dirs another("_another");  // another save of the same run, byte for byte but for its id
  ASSERT_NO_FATAL_FAILURE(save_at_two(another));
  const std::string s0 = "optimizer-rank-00000-of-00002.safetensors", s1 = "optimizer-rank-00001-of-00002.safetensors";
  struct Case {
    const char* what;
    std::function<void(const fs::path&)> damage;
    std::string expect, rank0_expect;
  };
  const std::vector<Case> cases = {
      // Rank 0 reads only its own shard at the same world size: it learns of this from rank 1.
      {"a flipped byte in shard 1", [&](const fs::path& c) { flip_byte(c / s1, 3); }, s1 + " does not match its CRC-32",
       "refused by rank 1:"},
      {"shard 0 missing", [&](const fs::path& c) { fs::remove(c / s0); }, s0, ""},
      {"shard 1 truncated", [&](const fs::path& c) { fs::resize_file(c / s1, fs::file_size(c / s1) - 8); }, s1, ""},
      {"shard 1 replaced by shard 0",
       [&](const fs::path& c) { fs::copy_file(c / s0, c / s1, fs::copy_options::overwrite_existing); }, s1, ""},
      {"the index missing", [&](const fs::path& c) { fs::remove(c / "trainer.json"); }, "trainer.json", ""},
      // Values that only a look at them tells, the checksums refreshed.
      {"a NaN exp_avg_sq in shard 1", [&](const fs::path& c) { rewrite_shard(c, s1, set_exp_avg_sq(NAN)); },
       s1 + ": tensor \"state.", "refused by rank 1:"},
      {"a negative exp_avg_sq in shard 0", [&](const fs::path& c) { rewrite_shard(c, s0, set_exp_avg_sq(-0.5f)); },
       "must be finite and >= 0", ""},
      // An index or a shard that lies about where the state belongs.
      {"two pieces swapped in the index", [&](const fs::path& c) { swap_equal_pieces(c, false); }, ".crc32", ""},
      {"two pieces swapped in the index, its CRC refreshed", [&](const fs::path& c) { swap_equal_pieces(c, true); },
       "but the index gives it", ""},
      {"shard 1 of another save with its manifest entry",
       [&](const fs::path& c) {
         fs::copy_file(fs::path(another.sharded) / s1, c / s1, fs::copy_options::overwrite_existing);
         refresh_manifest(c, s1);
       },
       s1 + " belongs to save", ""},
      {"shard 1 saying it is rank 0",
       [&](const fs::path& c) { rewrite_shard(c, s1, [](mt::io::SafetensorsFile& f) { f.metadata["rank"] = "0"; }); },
       "says it is rank 0 of 2", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const fs::path copy = d.root / "damaged";
    fs::remove_all(copy);
    fs::copy(d.sharded, copy);
    c.damage(copy);
    const auto res = run_ranks(
        "zero_sharded_refused", 2, std::chrono::seconds(50),
        {{-1, {"MT_SHARDED=" + copy.string(), "MT_EXPECT=" + c.expect, "MT_RANK0_EXPECT=" + c.rank0_expect}}});
    ASSERT_NO_FATAL_FAILURE(expect_passed(res, c.what));
    // One process's whole AdamW refuses it too, and keeps its state.
    auto model = make_mlp(3);
    mt::optim::AdamW opt(model->parameters(), kAdamW);
    mt::amp::GradScaler scaler(mt::amp::GradScalerOptions().enabled(false));
    std::vector<mt::Tensor> before;
    for (const auto& p : model->parameters()) before.push_back(p.clone());
    try {
      mt::io::load_checkpoint(copy.string(), *model, opt, scaler);
      ADD_FAILURE() << "loaded";
    } catch (const mt::Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos) << e.what();
    }
    EXPECT_TRUE(bit_equal(model->parameters(), before));
    EXPECT_TRUE(opt.state_tensors().empty());
  }
  // A save that fails on one rank leaves the previous checkpoint.
  expect_passed(run_ranks("zero_sharded_save_fails", 2, std::chrono::seconds(50), {{-1, {"MT_SHARDED=" + d.sharded}}}),
                "failed save");
}
