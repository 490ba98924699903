// What a libtorch user types next, built against the installed package: every name of
// docs/FROM_LIBTORCH.md's first table, each checked against PyTorch's result for the same input
// (tests/ops/pytorch_reference/libtorch_ops.json, the path given as the first argument).
// Prints each check; exits 1 if any fails.
#include <mixtrain/mixtrain.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>

namespace mt = mixtrain;
using mt::Tensor;
using nlohmann::json;

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  failures += ok ? 0 : 1;
}

double value(const json& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_string()) return v == "nan" ? NAN : (v == "inf" ? INFINITY : -INFINITY);
  return v.get<double>();
}

Tensor from_json(const json& j) {
  std::vector<double> v;
  for (const json& e : j["values"]) v.push_back(value(e));
  return mt::from_vector(v, j["shape"].get<std::vector<int64_t>>()).to(mt::dtype_from_name(j["dtype"]));
}

// Same dtype, shape and values (NaN where NaN; floats within 1e-5 relative).
bool agrees(const Tensor& got, const json& want) {
  if (std::string(mt::dtype_name(got.dtype())) != want["dtype"].get<std::string>()) return false;
  if (got.shape() != want["shape"].get<std::vector<int64_t>>()) return false;
  const Tensor g = got.to(mt::kFloat64).contiguous();
  const std::vector<double> v = g.to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i) {
    const double w = value(want["values"][i]);
    if (std::isnan(w) ? !std::isnan(v[i]) : std::abs(v[i] - w) > 1e-5 * std::abs(w) + 1e-7) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: libtorch_habits libtorch_ops.json\n");
    return 2;
  }
  std::ifstream in(argv[1]);
  const json fixture = json::parse(in);
  std::map<std::string, json> cases;
  for (const json& c : fixture["cases"]) cases[c["name"].get<std::string>()] = c;
  auto input = [&](const char* name, const char* key) { return from_json(cases.at(name)["inputs"][key]); };
  auto output = [&](const char* name, size_t k = 0) { return cases.at(name)["outputs"][k]; };
  auto grad = [&](const char* name, const char* key) { return cases.at(name)["grads"][key]; };

  // Factories and names.
  check(agrees(mt::tensor({{1, 2, 3}, {4, 5, 6}}), output("tensor_ints")), "tensor({{1, 2, 3}, {4, 5, 6}}) is int64");
  check(agrees(mt::tensor({1.5, -2.25, 3.0}), output("tensor_floats")), "tensor({1.5, ...}) is float32");
  check(agrees(mt::tensor({true, false, true}), output("tensor_bools")), "tensor({true, ...}) is bool");
  check(agrees(mt::arange(5), output("arange_int")), "arange(5) is int64");
  check(agrees(mt::arange(0., 5.), output("arange_float")), "arange(0., 5.) is float32");
  check(mt::kLong == mt::kInt64 && mt::kFloat == mt::kFloat32 && mt::kDouble == mt::kFloat64 && mt::kInt == mt::kInt32 &&
            mt::kHalf == mt::kFloat16,
        "kLong, kFloat, kDouble, kInt, kHalf");
  check(mt::Device("cuda:0") == mt::Device::cuda(0), "Device(\"cuda:0\")");
  const mt::Scalar s = input("item_int", "x").item();
  check(s.isIntegral(false) && s.toLong() == -7 && input("item_float", "x").item().toDouble() == 2.5,
        "item() returns a Scalar");

  // Truth tests.
  const Tensor x = input("all_dim1", "x");
  check(agrees(x.all(), output("all")) && agrees(x.all(1), output("all_dim1")) && agrees(x.any(0, true), output("any_dim0_keepdim")),
        "all(), all(1), any(0, true)");
  auto same_answer = [&](const char* name, bool got) { return agrees(mt::tensor(got), output(name)); };
  check(same_answer("equal_same", input("equal_same", "a").equal(input("equal_same", "b"))) &&
            same_answer("equal_promoted", input("equal_promoted", "a").equal(input("equal_promoted", "b"))),
        "equal()");
  check(same_answer("allclose_near", input("allclose_near", "a").allclose(input("allclose_near", "b"))) &&
            same_answer("allclose_far", input("allclose_far", "a").allclose(input("allclose_far", "b"))) &&
            same_answer("allclose_rtol", input("allclose_rtol", "a").allclose(input("allclose_rtol", "b"), 1e-2)) &&
            same_answer("allclose_nan_equal", input("allclose_nan_equal", "a")
                                                  .allclose(input("allclose_nan_equal", "b"), 1e-5, 1e-8, true)),
        "allclose(rtol, atol, equal_nan)");

  // Differentiable ops: values and gradients of sum(out * w).
  {
    Tensor c = input("clamp", "x").set_requires_grad(true);
    const Tensor out = c.clamp(-0.5, 0.75);
    mt::sum(out * input("clamp", "w")).backward();
    check(agrees(out, output("clamp")) && agrees(c.grad(), grad("clamp", "x")), "clamp(min, max) and its gradient");
    check(agrees(input("clamp_min", "x").clamp_min(0.25), output("clamp_min")) &&
              agrees(input("clamp_max", "x").clamp_max(-0.25), output("clamp_max")),
          "clamp_min, clamp_max");
  }
  {
    Tensor m = input("masked_fill", "x").set_requires_grad(true);
    const Tensor out = m.masked_fill(input("masked_fill", "mask"), -7.5);
    mt::sum(out * input("masked_fill", "w")).backward();
    check(agrees(out, output("masked_fill")) && agrees(m.grad(), grad("masked_fill", "x")), "masked_fill and its gradient");
  }
  {
    Tensor t = input("topk_dim1_smallest", "x").set_requires_grad(true);
    auto [values, indices] = t.topk(2, 1, /*largest=*/false);
    mt::sum(values * input("topk_dim1_smallest", "w")).backward();
    check(agrees(values, output("topk_dim1_smallest", 0)) && agrees(indices, output("topk_dim1_smallest", 1)) &&
              agrees(t.grad(), grad("topk_dim1_smallest", "x")),
          "topk values, int64 indices and the gradient");
  }
  {
    Tensor n = input("norm_p2_dim1", "x").set_requires_grad(true);
    const Tensor out = n.norm(2, 1);
    mt::sum(out * input("norm_p2_dim1", "w")).backward();
    check(agrees(out, output("norm_p2_dim1")) && agrees(n.grad(), grad("norm_p2_dim1", "x")),
          "norm(2, 1) and its gradient (0 on the zero row)");
    check(agrees(input("norm_pinf_dim1", "x").norm(INFINITY, 1), output("norm_pinf_dim1")) &&
              agrees(input("norm_default", "x").norm(), output("norm_default")),
          "norm(inf, 1), norm()");
  }
  check(agrees(input("type_as", "x").type_as(input("type_as", "other")), output("type_as")), "type_as");
  check(agrees(input("squeeze", "x").squeeze(), output("squeeze")), "squeeze()");
  {
    Tensor w = mt::ones({2}).set_requires_grad(true);
    check(std::string((w * 2.0).grad_fn()->name()) == "MulBackward0" &&
              std::string(w.sum().grad_fn()->name()) == "SumBackward0",
          "grad_fn names MulBackward0, SumBackward0");
    mt::NoGradGuard no_grad;
    check(!(w * 2.0).requires_grad(), "NoGradGuard");
  }

  // Modules, files and data.
  mt::nn::Linear model(3, 2);
  int named = 0;
  for (const auto& p : model->named_parameters()) named += !p.key().empty() && p.value().defined();
  check(named == 2 && model->named_parameters()["weight"].defined(), "named_parameters() items with key() / value()");
  const std::string dir = std::string(argc > 2 ? argv[2] : ".") + "/";
  mt::save(model, dir + "model.safetensors");
  mt::nn::Linear copy(3, 2);
  mt::load(copy, dir + "model.safetensors");
  mt::save(std::vector<Tensor>{mt::arange(3), mt::ones({2, 2})}, dir + "tensors.safetensors");
  std::vector<Tensor> back;
  mt::load(back, dir + "tensors.safetensors");
  check(copy->weight.equal(model->weight) && back.size() == 2 && back[0].equal(mt::arange(3)), "save / load");
  auto loader = mt::data::make_data_loader<mt::data::SequentialSampler>(
      mt::data::TensorDataset(mt::randn({5, 3}), mt::arange(5)), mt::data::DataLoaderOptions().batch_size(2));
  int64_t rows = 0;
  for (const mt::data::Batch& b : *loader) rows += b.data.size(0);
  check(rows == 5, "make_data_loader");

  std::printf("libtorch habits against PyTorch %s: %s\n", fixture["torch"].get<std::string>().c_str(),
              failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
