// The ops a libtorch user reaches for next, against PyTorch's own results: every case of
// tests/ops/pytorch_reference/libtorch_ops.json (written by make_libtorch_ops.py in that folder
// with PyTorch 2.15) is run on the same inputs, and the outputs' dtypes, shapes and values and
// the gradients of sum(out * w) must match. Integers, bools, indices and picked values exactly;
// computed floats to fp32's tolerance; NaN where PyTorch has NaN.
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "support/testing.h"

namespace mt = mixtrain;
using mt::Tensor;
using nlohmann::json;

namespace {

double number_of(const json& v) {
  if (v.is_boolean()) return v.get<bool>() ? 1.0 : 0.0;
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    return s == "nan" ? NAN : (s == "inf" ? INFINITY : -INFINITY);
  }
  return v.get<double>();
}

// A Python number as PyTorch saw it: an int stays integral, a float (or inf) floating.
mt::Scalar scalar_of(const json& v) {
  if (v.is_boolean()) return mt::Scalar(v.get<bool>());
  if (v.is_number_integer()) return mt::Scalar(v.get<int64_t>());
  return mt::Scalar(number_of(v));
}

Tensor tensor_of(const json& j) {
  std::vector<double> values;
  for (const json& v : j["values"]) values.push_back(number_of(v));
  const mt::Shape shape = j["shape"].get<std::vector<int64_t>>();
  return mt::from_vector(values, shape).to(mt::dtype_from_name(j["dtype"].get<std::string>()));
}

// Same dtype and shape; values equal (NaN where NaN) within tol for floating dtypes, exactly else.
::testing::AssertionResult matches(const Tensor& got, const json& want, double rtol, double atol) {
  if (!got.defined()) return ::testing::AssertionFailure() << "undefined tensor";
  const std::string dtype = want["dtype"].get<std::string>();
  if (mt::dtype_name(got.dtype()) != dtype)
    return ::testing::AssertionFailure() << "dtype " << got.dtype() << ", PyTorch's " << dtype;
  if (got.shape() != want["shape"].get<std::vector<int64_t>>())
    return ::testing::AssertionFailure() << "shape " << mt::shape_str(got.shape()) << ", PyTorch's " << want["shape"];
  const std::vector<double> g = mt::testing::to_doubles(got);
  const bool exact = !mt::is_floating(got.dtype());
  for (size_t i = 0; i < g.size(); ++i) {
    const double w = number_of(want["values"][i]);
    const bool ok = std::isnan(w) ? std::isnan(g[i])
                    : exact || std::isinf(w) ? g[i] == w
                                             : std::abs(g[i] - w) <= atol + rtol * std::abs(w);
    if (!ok) return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << ", PyTorch's " << w;
  }
  return ::testing::AssertionSuccess();
}

std::optional<mt::Scalar> arg_scalar(const json& args, const char* key) {
  return args.contains(key) ? std::optional<mt::Scalar>(scalar_of(args[key])) : std::nullopt;
}

using Inputs = std::map<std::string, Tensor>;
using Run = std::function<std::vector<Tensor>(const Inputs&, const json& args)>;

// The C++ spelling of each case's call, as a libtorch user writes it.
std::map<std::string, Run> runners() {
  using V = std::vector<Tensor>;
  std::map<std::string, Run> r;
  r["all"] = [](const Inputs& in, const json& a) {
    return V{a.contains("dim") ? in.at("x").all(a["dim"].get<int64_t>(), a.value("keepdim", false)) : in.at("x").all()};
  };
  r["any"] = [](const Inputs& in, const json& a) {
    return V{a.contains("dim") ? in.at("x").any(a["dim"].get<int64_t>(), a.value("keepdim", false)) : in.at("x").any()};
  };
  r["allclose"] = [](const Inputs& in, const json& a) {
    const bool close = in.at("a").allclose(in.at("b"), a.value("rtol", 1e-5), a.value("atol", 1e-8), a.value("equal_nan", false));
    return V{mt::tensor(close)};
  };
  r["equal"] = [](const Inputs& in, const json&) { return V{mt::tensor(in.at("a").equal(in.at("b")))}; };
  r["clamp"] = [](const Inputs& in, const json& a) { return V{in.at("x").clamp(arg_scalar(a, "min"), arg_scalar(a, "max"))}; };
  r["clamp_min"] = [](const Inputs& in, const json& a) { return V{in.at("x").clamp_min(scalar_of(a["min"]))}; };
  r["clamp_max"] = [](const Inputs& in, const json& a) { return V{in.at("x").clamp_max(scalar_of(a["max"]))}; };
  r["clamp_tensor"] = [](const Inputs& in, const json&) { return V{in.at("x").clamp(in.at("lo"), in.at("hi"))}; };
  r["masked_fill"] = [](const Inputs& in, const json& a) { return V{in.at("x").masked_fill(in.at("mask"), scalar_of(a["value"]))}; };
  r["masked_fill_tensor"] = [](const Inputs& in, const json&) { return V{in.at("x").masked_fill(in.at("mask"), in.at("value"))}; };
  r["topk"] = [](const Inputs& in, const json& a) {
    auto [values, indices] = in.at("x").topk(a["k"].get<int64_t>(), a.value("dim", int64_t{-1}), a.value("largest", true));
    return V{values, indices};
  };
  r["norm"] = [](const Inputs& in, const json& a) {
    if (!a.contains("p")) return V{in.at("x").norm()};
    const mt::Scalar p = scalar_of(a["p"]);
    if (!a.contains("dim")) return V{in.at("x").norm(p)};
    return V{in.at("x").norm(p, a["dim"].get<std::vector<int64_t>>(), a.value("keepdim", false))};
  };
  r["type_as"] = [](const Inputs& in, const json&) { return V{in.at("x").type_as(in.at("other"))}; };
  r["squeeze"] = [](const Inputs& in, const json&) { return V{in.at("x").squeeze()}; };
  r["arange"] = [](const Inputs&, const json& a) {
    std::vector<mt::Scalar> b;
    for (const json& v : a["bounds"]) b.push_back(scalar_of(v));
    if (b.size() == 1) return V{mt::arange(b[0])};
    if (b.size() == 2) return V{mt::arange(b[0], b[1])};
    return V{mt::arange(b[0], b[1], b[2])};
  };
  return r;
}

// torch.tensor(...) in Python and mixtrain::tensor({...}) in C++ with the same literals.
std::map<std::string, Tensor> literals() {
  return {{"tensor_ints", mt::tensor({{1, 2, 3}, {4, 5, 6}})},
          {"tensor_floats", mt::tensor({1.5, -2.25, 3.0})},
          {"tensor_bools", mt::tensor({true, false, true})},
          {"tensor_mixed", mt::tensor({1, 2.5})},
          {"tensor_scalar", mt::tensor(7)}};
}

json load_fixture() {
  std::ifstream in(std::string(MT_SOURCE_DIR) + "/tests/ops/pytorch_reference/libtorch_ops.json");
  EXPECT_TRUE(in.good()) << "tests/ops/pytorch_reference/libtorch_ops.json is missing";
  return json::parse(in);
}

}  // namespace

TEST(LibtorchPyTorch, EveryCaseMatchesPyTorch) {
  const json fixture = load_fixture();
  ASSERT_GE(fixture["cases"].size(), 50u);
  const auto run = runners();
  const auto lits = literals();
  for (const json& c : fixture["cases"]) {
    const std::string name = c["name"].get<std::string>(), op = c["op"].get<std::string>();
    SCOPED_TRACE(name);
    if (op == "tensor") {
      EXPECT_TRUE(matches(lits.at(name), c["outputs"][0], 0, 0));
      continue;
    }
    Inputs in;
    for (const auto& [k, v] : c["inputs"].items()) in[k] = tensor_of(v);
    if (op == "item") {
      const mt::Scalar s = in.at("x").item();
      const std::string kind = c["outputs"][0]["kind"].get<std::string>();
      EXPECT_EQ(s.isFloatingPoint(), kind == "float");
      EXPECT_EQ(s.isIntegral(false), kind == "int");
      EXPECT_EQ(s.isBoolean(), kind == "bool");
      EXPECT_EQ(s.toDouble(), number_of(c["outputs"][0]["value"]));
      continue;
    }
    const bool grads = c.contains("grads");
    if (grads)
      for (const auto& [k, v] : c["grads"].items()) in[k].set_requires_grad(true);
    const auto it = run.find(op);
    ASSERT_NE(it, run.end()) << "no C++ call for op " << op;
    const std::vector<Tensor> outs = it->second(in, c["args"]);
    ASSERT_EQ(outs.size(), c["outputs"].size());
    for (size_t o = 0; o < outs.size(); ++o) EXPECT_TRUE(matches(outs[o], c["outputs"][o], 2e-6, 1e-7)) << "output " << o;
    if (!grads) continue;
    mt::sum(outs[0] * in.at("w")).backward();
    for (const auto& [k, v] : c["grads"].items()) {
      EXPECT_TRUE(matches(in.at(k).grad(), v, 2e-6, 1e-7)) << "gradient of " << k;
    }
  }
}

TEST(LibtorchPyTorch, TheFixtureNamesItsGenerator) {
  const json fixture = load_fixture();
  EXPECT_EQ(fixture["generator"], "tests/ops/pytorch_reference/make_libtorch_ops.py");
  EXPECT_EQ(fixture["torch"].get<std::string>().rfind("2.15", 0), 0u) << fixture["torch"];
}
