// mixtrain::save / load (libtorch's torch::save / torch::load) of a module, a tensor and a list
// of tensors through safetensors files, and checkpoints of runs without a GradScaler.
#include <fstream>

#include "support/testing.h"

namespace mt = mixtrain;
namespace nn = mixtrain::nn;
using mt::Tensor;
using mt::testing::expect_error;
using mt::testing::TempDir;

namespace {
std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }
}  // namespace

TEST(Serialize, ModuleRoundTripIntoAnotherModel) {
  TempDir tmp("mt_serialize");
  mt::manual_seed(1);
  nn::Sequential a(nn::BatchNorm2d(3), nn::Flatten(), nn::Linear(12, 2));
  a->forward(mt::randn({5, 3, 2, 2}));  // moves the batch norm's running statistics
  mt::save(a, tmp.file("model.safetensors"));
  mt::manual_seed(2);
  nn::Sequential b(nn::BatchNorm2d(3), nn::Flatten(), nn::Linear(12, 2));
  const Tensor weight_before = b->named_parameters()["2.weight"];
  mt::load(b, tmp.file("model.safetensors"));
  for (const auto& item : a->named_parameters()) EXPECT_EQ(values(b->named_parameters()[item.key()]), values(item.value()));
  for (const auto& [name, buf] : a->named_buffers()) EXPECT_EQ(values(b->named_buffers()[name]), values(buf)) << name;
  EXPECT_TRUE(weight_before.is_same(b->named_parameters()["2.weight"]));  // copied into, not replaced
  // The file is plain safetensors: any reader sees the dotted names.
  const auto file = mt::io::load_safetensors(tmp.file("model.safetensors"));
  EXPECT_EQ(file.metadata.at("mixtrain.content"), "module");
  EXPECT_EQ(file.tensors.size(), a->named_parameters().size() + a->named_buffers().size());
  // Through a shared_ptr as well.
  auto lin = std::make_shared<nn::LinearImpl>(3, 4);
  mt::save(lin, tmp.file("lin.safetensors"));
  mt::load(lin, tmp.file("lin.safetensors"));
}

TEST(Serialize, TensorsRoundTripInDtypeShapeAndOrder) {
  TempDir tmp("mt_serialize");
  const Tensor t = mt::tensor({{1.5, -2.0}, {0.25, 8.0}}).to(mt::kBFloat16);
  mt::save(t, tmp.file("t.safetensors"));
  Tensor back;
  mt::load(back, tmp.file("t.safetensors"));
  EXPECT_EQ(back.dtype(), mt::kBFloat16);
  EXPECT_TRUE(back.equal(t));
  // A list keeps its order, though the writer lays tensors out by size.
  const std::vector<Tensor> list = {mt::tensor({1}), mt::ones({3, 3}, mt::kFloat64), mt::tensor(true), mt::zeros({0})};
  mt::save(list, tmp.file("list.safetensors"));
  std::vector<Tensor> got;
  mt::load(got, tmp.file("list.safetensors"));
  ASSERT_EQ(got.size(), list.size());
  for (size_t i = 0; i < list.size(); ++i) EXPECT_TRUE(got[i].equal(list[i])) << i;
  mt::save(std::vector<Tensor>{}, tmp.file("empty.safetensors"));
  mt::load(got, tmp.file("empty.safetensors"));
  EXPECT_TRUE(got.empty());
}

TEST(Serialize, ABadFileIsRejectedWholeAndChangesNothing) {
  TempDir tmp("mt_serialize");
  nn::Linear a(3, 4), other(3, 5);
  mt::save(a, tmp.file("a.safetensors"));
  nn::Linear b(3, 4);
  const std::vector<float> before = values(b->weight);
  expect_error([&] { mt::load(other, tmp.file("a.safetensors")); }, {"a.safetensors", "shape mismatch", "weight", "nothing"});
  // A tensor file is not a module, a module file is not a tensor.
  mt::save(mt::ones({2}), tmp.file("t.safetensors"));
  expect_error([&] { mt::load(b, tmp.file("t.safetensors")); }, {"t.safetensors", "holds a tensor, not a module"});
  Tensor keep = mt::ones({1});
  expect_error([&] { mt::load(keep, tmp.file("a.safetensors")); }, {"holds a module, not a tensor"});
  EXPECT_EQ(values(keep), std::vector<float>{1});
  // A truncated file: the safetensors reader refuses it before anything is copied.
  std::string bytes;
  {
    std::ifstream in(tmp.file("a.safetensors"), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::ofstream(tmp.file("cut.safetensors"), std::ios::binary) << bytes.substr(0, bytes.size() - 4);
  expect_error([&] { mt::load(b, tmp.file("cut.safetensors")); }, "cut.safetensors");
  // A plain safetensors file without mixtrain's metadata.
  mt::io::save_safetensors(tmp.file("plain.safetensors"), {{"weight", mt::ones({4, 3})}});
  expect_error([&] { mt::load(b, tmp.file("plain.safetensors")); }, {"plain.safetensors", "not written by mixtrain::save"});
  EXPECT_EQ(values(b->weight), before);
  expect_error([&] { mt::save(Tensor(), tmp.file("u.safetensors")); }, {"save", "undefined"});
}

TEST(Serialize, CheckpointsWithoutAScalerSaveAndLoadAndOldOnesStillLoad) {
  TempDir tmp("mt_serialize");
  mt::manual_seed(3);
  nn::Linear model(2, 2);
  mt::optim::AdamW opt(model->parameters(), mt::optim::AdamWOptions(1e-2));
  model->forward(mt::randn({4, 2})).sum().backward();
  opt.step();
  mt::io::save_checkpoint(tmp.file("fp32"), model, opt, 1);  // no GradScaler
  std::ifstream manifest(tmp.file("fp32") + "/trainer.json");
  const nlohmann::json trainer = nlohmann::json::parse(manifest);
  EXPECT_FALSE(trainer.contains("scaler"));

  nn::Linear restored(2, 2);
  mt::optim::AdamW opt2(restored->parameters(), mt::optim::AdamWOptions(1e-2));
  EXPECT_EQ(mt::io::load_checkpoint(tmp.file("fp32"), restored, opt2), 1);
  EXPECT_EQ(values(restored->weight), values(model->weight));
  // Asking for a scaler the checkpoint does not hold is an Error, and loads nothing.
  nn::Linear fresh(2, 2);
  const std::vector<float> fresh_weight = values(fresh->weight);
  mt::optim::AdamW opt3(fresh->parameters(), mt::optim::AdamWOptions(1e-2));
  mt::amp::GradScaler scaler;
  expect_error([&] { mt::io::load_checkpoint(tmp.file("fp32"), fresh, opt3, scaler); },
               {"trainer.json", "no \"scaler\" entry", "GradScaler"});
  EXPECT_EQ(values(fresh->weight), fresh_weight);
  // A checkpoint with a scaler (every one saved before) loads with or without one.
  mt::io::save_checkpoint(tmp.file("fp16"), model, opt, scaler, 2);
  EXPECT_EQ(mt::io::load_checkpoint(tmp.file("fp16"), fresh, opt3), 2);
  EXPECT_EQ(mt::io::load_checkpoint(tmp.file("fp16"), fresh, opt3, scaler), 2);
}
