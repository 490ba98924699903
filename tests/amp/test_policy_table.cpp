// The policy table as data: defaults against PyTorch's CUDA lists, per-op overrides, JSON dump
// and load, and whole-document rejection of bad files.
#include <cstdio>
#include <fstream>
#include <map>
#include <set>

#include "amp_test_util.h"

namespace mixtrain::amp_test {
namespace {

using amp::CastPolicy;

// PyTorch's CUDA autocast lists (docs/REFERENCE_AMP.md, autocast_mode.h
// @d70fe7f3), restricted to names mixtrain has, plus cross_entropy from the docs-level fp32
// list (§1.3 "Docs-level names") and the banned op (§1.4). Everything else is unlisted there
// and must be passthrough. dot and addcmul are on the promote list. norm is on PyTorch's
// fp32_append_dtype list (norm.Scalar, norm.ScalarOpt_dim): its result is computed and returned
// in fp32, which is what mixtrain's fp32 policy gives.
const std::map<std::string, CastPolicy>& pytorch_cuda_lists() {
  static const std::map<std::string, CastPolicy> lists = {
      {"matmul", CastPolicy::LowerPrecision},
      {"bmm", CastPolicy::LowerPrecision},
      {"linear", CastPolicy::LowerPrecision},
      {"conv2d", CastPolicy::LowerPrecision},
      {"conv_transpose2d", CastPolicy::LowerPrecision},
      {"scaled_dot_product_attention", CastPolicy::LowerPrecision},
      {"layer_norm", CastPolicy::Float32},
      {"group_norm", CastPolicy::Float32},
      {"upsample_nearest2d", CastPolicy::Float32},
      {"upsample_bilinear2d", CastPolicy::Float32},
      {"exp", CastPolicy::Float32},
      {"log", CastPolicy::Float32},
      {"pow", CastPolicy::Float32},
      {"rsqrt", CastPolicy::Float32},
      {"softplus", CastPolicy::Float32},
      {"norm", CastPolicy::Float32},
      {"mse_loss", CastPolicy::Float32},
      {"nll_loss", CastPolicy::Float32},
      {"binary_cross_entropy_with_logits", CastPolicy::Float32},
      {"cross_entropy", CastPolicy::Float32},
      {"sum", CastPolicy::Float32OptDtype},
      {"softmax", CastPolicy::Float32OptDtype},
      {"log_softmax", CastPolicy::Float32OptDtype},
      {"dot", CastPolicy::Promote},
      {"addcmul", CastPolicy::Promote},
      {"binary_cross_entropy", CastPolicy::Banned},
  };
  return lists;
}

using PolicyTableTest = AmpTest;

TEST_F(PolicyTableTest, DefaultsFollowPyTorchCudaLists) {
  std::set<std::string> names;
  for (const amp::PolicyEntry& e : amp::policy_table()) {
    names.insert(e.op);
    auto it = pytorch_cuda_lists().find(e.op);
    const CastPolicy expected = it == pytorch_cuda_lists().end() ? CastPolicy::Passthrough : it->second;
    EXPECT_EQ(amp::cast_policy_name(e.policy), std::string(amp::cast_policy_name(expected))) << "op " << e.op;
  }
  // A listed name missing from the table is a typo here or an op that was renamed.
  for (const auto& [op, policy] : pytorch_cuda_lists()) EXPECT_TRUE(names.count(op)) << op << " is not in the table";
  EXPECT_EQ(names.size(), amp::policy_table().size()) << "op names must be unique";
}

TEST_F(PolicyTableTest, PolicyOfAndSetPolicy) {
  EXPECT_EQ(amp::policy_of("matmul"), CastPolicy::LowerPrecision);
  amp::set_policy("relu", CastPolicy::Float32);
  EXPECT_EQ(amp::policy_of("relu"), CastPolicy::Float32);
  amp::reset_policy_table();
  EXPECT_EQ(amp::policy_of("relu"), CastPolicy::Passthrough);
  expect_error([] { amp::policy_of("matmull"); }, {"amp::policy_of", "unknown op", "matmull"});
  expect_error([] { amp::set_policy("not_an_op", CastPolicy::Float32); }, {"amp::set_policy", "not_an_op"});
}

TEST_F(PolicyTableTest, JsonDumpNamesEveryOp) {
  const nlohmann::json j = amp::policy_table_to_json();
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.size(), amp::policy_table().size());
  EXPECT_EQ(j.at("matmul"), "lower_precision");
  EXPECT_EQ(j.at("softmax"), "fp32_set_opt_dtype");
  EXPECT_EQ(j.at("exp"), "fp32");
  EXPECT_EQ(j.at("dot"), "promote");
  EXPECT_EQ(j.at("binary_cross_entropy"), "banned");
  EXPECT_EQ(j.at("relu"), "passthrough");
}

TEST_F(PolicyTableTest, JsonRoundTripAndPartialLoad) {
  amp::set_policy("gelu", CastPolicy::Float32);
  amp::set_policy("matmul", CastPolicy::Float32);
  const nlohmann::json saved = amp::policy_table_to_json();
  amp::reset_policy_table();
  amp::load_policy_table(saved);
  EXPECT_EQ(amp::policy_table_to_json(), saved);
  // A partial document changes only the ops it names.
  amp::load_policy_table(nlohmann::json{{"matmul", "lower_precision"}});
  EXPECT_EQ(amp::policy_of("matmul"), CastPolicy::LowerPrecision);
  EXPECT_EQ(amp::policy_of("gelu"), CastPolicy::Float32);
}

// The valid entry sorts before the bad one (nlohmann::json keeps keys sorted), so a loader that
// applied entries as it went would have changed "add" before failing.
TEST_F(PolicyTableTest, BadDocumentsAreRejectedWhole) {
  const nlohmann::json before = amp::policy_table_to_json();
  expect_error([] { amp::load_policy_table(nlohmann::json{{"add", "fp32"}, {"zz_not_an_op", "fp32"}}); },
               {"entry \"zz_not_an_op\"", "unknown op", "nothing was applied"});
  EXPECT_EQ(amp::policy_table_to_json(), before);
  expect_error([] { amp::load_policy_table(nlohmann::json{{"add", "fp32"}, {"matmul", "half"}}); },
               {"entry \"matmul\"", "unknown policy", "\"half\"", "lower_precision"});
  EXPECT_EQ(amp::policy_table_to_json(), before);
  expect_error([] { amp::load_policy_table(nlohmann::json{{"add", "fp32"}, {"relu", 3}}); },
               {"entry \"relu\"", "must be a string", "number"});
  EXPECT_EQ(amp::policy_table_to_json(), before);
  expect_error([] { amp::load_policy_table(nlohmann::json::array({"matmul"})); }, {"expected a JSON object", "array"});
  EXPECT_EQ(amp::policy_table_to_json(), before);
}

TEST_F(PolicyTableTest, LoadFromFile) {
  const std::string dir = ::testing::TempDir();
  const std::string good = dir + "/mt_policy_good.json", bad = dir + "/mt_policy_bad.json",
                    broken = dir + "/mt_policy_broken.json";
  std::ofstream(good) << R"({"relu": "fp32", "exp": "passthrough"})";
  std::ofstream(bad) << R"({"relu": "fp32", "softmaxx": "fp32"})";
  std::ofstream(broken) << R"({"relu": "fp32",)";
  const nlohmann::json before = amp::policy_table_to_json();
  expect_error([&] { amp::load_policy_table_file(bad); }, {bad, "softmaxx"});
  expect_error([&] { amp::load_policy_table_file(broken); }, {broken, "not valid JSON"});
  expect_error([&] { amp::load_policy_table_file(dir + "/mt_no_such_file.json"); }, {"cannot open"});
  EXPECT_EQ(amp::policy_table_to_json(), before);
  amp::load_policy_table_file(good);
  EXPECT_EQ(amp::policy_of("relu"), CastPolicy::Float32);
  EXPECT_EQ(amp::policy_of("exp"), CastPolicy::Passthrough);
  for (const std::string& p : {good, bad, broken}) std::remove(p.c_str());
}

// PyTorch's CPU lists (KERNEL_CPU in aten/src/ATen/autocast_mode.cpp @d70fe7f3), restricted to
// names mixtrain has (docs/REFERENCE_AMP.md); every other op runs as its inputs come.
TEST_F(PolicyTableTest, TorchCpuPresetIsPyTorchsCpuLists) {
  const std::map<std::string, CastPolicy> cpu_lists = {
      {"matmul", CastPolicy::LowerPrecision},  {"bmm", CastPolicy::LowerPrecision},
      {"linear", CastPolicy::LowerPrecision},  {"conv2d", CastPolicy::LowerPrecision},
      {"conv_transpose2d", CastPolicy::LowerPrecision}, {"scaled_dot_product_attention", CastPolicy::LowerPrecision},
      {"mse_loss", CastPolicy::Float32},       {"nll_loss", CastPolicy::Float32},
      {"cross_entropy", CastPolicy::Float32},  {"binary_cross_entropy", CastPolicy::Float32},
      {"binary_cross_entropy_with_logits", CastPolicy::Float32},
      {"cat", CastPolicy::Promote},            {"stack", CastPolicy::Promote},
  };
  amp::set_policy("relu", CastPolicy::Float32);  // replaced, not kept
  amp::apply_policy_preset(amp::PolicyPreset::TorchCpu);
  std::set<std::string> names;
  for (const amp::PolicyEntry& e : amp::policy_table()) {
    names.insert(e.op);
    auto it = cpu_lists.find(e.op);
    const CastPolicy expected = it == cpu_lists.end() ? CastPolicy::Passthrough : it->second;
    EXPECT_EQ(amp::cast_policy_name(e.policy), std::string(amp::cast_policy_name(expected))) << "op " << e.op;
  }
  for (const auto& [op, policy] : cpu_lists) EXPECT_TRUE(names.count(op)) << op << " is not in the table";
  EXPECT_STREQ(amp::policy_preset_name(amp::PolicyPreset::TorchCpu), "torch_cpu");
  // Cuda is the defaults again.
  amp::apply_policy_preset(amp::PolicyPreset::Cuda);
  for (const amp::PolicyEntry& e : amp::policy_table()) {
    auto it = pytorch_cuda_lists().find(e.op);
    EXPECT_EQ(e.policy, it == pytorch_cuda_lists().end() ? CastPolicy::Passthrough : it->second) << e.op;
  }
  EXPECT_STREQ(amp::policy_preset_name(amp::PolicyPreset::Cuda), "cuda");
}

}  // namespace
}  // namespace mixtrain::amp_test
