// Table-driven: every op in amp::policy_table() is called with inputs of each dtype it accepts,
// under autocast fp16, autocast bf16, a nested enabled=false scope and outside any scope, and its
// output dtype is checked against what its policy prescribes. The elementwise ops come from the
// shared sample registry (tests/ops/op_samples.h); any other op without an invoker here fails
// the test, so a new one must be added.
#include <functional>
#include <map>
#include <set>

#include "amp_test_util.h"
#include "ops/op_samples.h"

namespace mixtrain::amp_test {
namespace {

namespace F = nn::functional;
using amp::CastPolicy;

struct Invoker {
  std::vector<DType> dtypes;                            // input dtypes the op accepts
  std::function<Tensor(DType)> call;                    // builds inputs of that dtype, calls the op
  std::function<DType(DType)> result = [](DType d) { return d; };  // output dtype when computing in d
};

const std::vector<DType> kFloats = {kFloat32, kFloat16, kBFloat16, kFloat64};
const std::vector<DType> kAll = {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kInt32};

Tensor make(const Shape& shape, DType d) { return (randn(shape) * 3.0).to(d); }
Tensor probability(const Shape& shape, DType d) { return (rand(shape) * 0.8 + 0.1).to(d); }
Tensor labels(int64_t n, int64_t classes) { return randint(0, classes, {n}); }


std::multimap<std::string, Invoker> invokers() {
  std::map<std::string, Invoker> m;
  m["to"] = {kAll, [](DType d) { return make({4}, d).to(kFloat32); }, [](DType) { return kFloat32; }};
  m["contiguous"] = {kAll, [](DType d) { return make({2, 3}, d).t().contiguous(); }};
  m["clone"] = {kAll, [](DType d) { return make({3}, d).clone(); }};
  m["reshape"] = {kAll, [](DType d) { return make({2, 3}, d).reshape({3, 2}); }};
  m["transpose"] = {kAll, [](DType d) { return transpose(make({2, 3}, d), 0, 1); }};
  m["permute"] = {kAll, [](DType d) { return permute(make({2, 3, 4}, d), {2, 0, 1}); }};
  m["slice"] = {kAll, [](DType d) { return slice(make({6}, d), 0, 1, 5, 2); }};
  m["expand"] = {kAll, [](DType d) { return expand(make({1, 3}, d), {4, 3}); }};
  m["matmul"] = {kFloats, [](DType d) { return matmul(make({2, 3}, d), make({3, 4}, d)); }};
  m["bmm"] = {kFloats, [](DType d) { return bmm(make({2, 2, 3}, d), make({2, 3, 4}, d)); }};
  m["linear"] = {kFloats, [](DType d) { return linear(make({2, 3}, d), make({4, 3}, d), make({4}, d)); }};
  m["where"] = {kFloats, [](DType d) { return where(gt(make({4}, kFloat32), zeros({4})), make({4}, d), make({4}, d)); }};
  m["compare"] = {kAll, [](DType d) { return lt(make({4}, d), make({4}, d)); }, [](DType) { return kBool; }};
  m["sum"] = {kAll, [](DType d) { return sum(make({2, 3}, d), {1}); },
              [](DType d) { return is_floating(d) ? d : kInt64; }};
  m["mean"] = {kFloats, [](DType d) { return mean(make({2, 3}, d)); }};
  m["max"] = {kAll, [](DType d) { return max(make({2, 3}, d), 1); }};
  m["min"] = {kAll, [](DType d) { return min(make({2, 3}, d), 0); }};
  m["argmax"] = {kAll, [](DType d) { return argmax(make({2, 3}, d), 1); }, [](DType) { return kInt64; }};
  m["softmax"] = {kFloats, [](DType d) { return softmax(make({2, 3}, d), 1); }};
  m["log_softmax"] = {kFloats, [](DType d) { return log_softmax(make({2, 3}, d), 1); }};
  m["mse_loss"] = {kFloats, [](DType d) { return F::mse_loss(make({4}, d), make({4}, d)); }};
  m["nll_loss"] = {kFloats, [](DType d) { return F::nll_loss(log_softmax(make({4, 3}, d), 1), labels(4, 3)); }};
  m["cross_entropy"] = {kFloats, [](DType d) { return F::cross_entropy(make({4, 3}, d), labels(4, 3)); }};
  m["binary_cross_entropy_with_logits"] = {
      kFloats, [](DType d) { return F::binary_cross_entropy_with_logits(make({4}, d), probability({4}, d)); }};
  m["binary_cross_entropy"] = {
      kFloats, [](DType d) { return F::binary_cross_entropy(probability({4}, d), probability({4}, d)); }};
  m["dot"] = {kFloats, [](DType d) { return dot(make({5}, d), make({5}, d)); }};
  m["addcmul"] = {kFloats, [](DType d) { return addcmul(make({2, 3}, d), make({3}, d), make({2, 3}, d), 0.5); }};
  m["dropout"] = {kFloats, [](DType d) { return F::dropout(make({8}, d), 0.5, true); }};
  m["conv2d"] = {kFloats, [](DType d) { return F::conv2d(make({1, 2, 5, 5}, d), make({3, 2, 3, 3}, d), make({3}, d)); }};
  m["conv_transpose2d"] = {
      kFloats, [](DType d) { return F::conv_transpose2d(make({1, 2, 3, 3}, d), make({2, 3, 2, 2}, d), make({3}, d), 2); }};
  m["scaled_dot_product_attention"] = {kFloats, [](DType d) {
    return F::scaled_dot_product_attention(make({1, 2, 4, 8}, d), make({1, 2, 4, 8}, d), make({1, 2, 4, 8}, d),
                                           Tensor(), 0.0, true);
  }};
  m["max_pool2d"] = {kFloats, [](DType d) { return F::max_pool2d(make({1, 2, 4, 4}, d), 2); }};
  m["upsample_nearest2d"] = {kFloats, [](DType d) { return F::upsample_nearest2d(make({1, 2, 3, 3}, d), {6, 6}); }};
  m["upsample_bilinear2d"] = {
      kFloats, [](DType d) { return F::upsample_bilinear2d(make({1, 2, 3, 3}, d), {6, 6}, false); }};
  m["batch_norm"] = {kFloats, [](DType d) {
    // fp32 statistics and affine parameters, as a half model keeps them (fp64 runs all in fp64).
    const TensorOptions p(d == kFloat64 ? kFloat64 : kFloat32);
    return F::batch_norm(make({2, 3, 4, 4}, d), zeros({3}, p), ones({3}, p), ones({3}, p), zeros({3}, p), true);
  }};
  m["group_norm"] = {kFloats, [](DType d) { return F::group_norm(make({2, 4, 3, 3}, d), 2, make({4}, d), make({4}, d)); }};
  m["layer_norm"] = {kFloats, [](DType d) { return F::layer_norm(make({2, 3, 8}, d), {8}, make({8}, d), make({8}, d)); }};
  m["embedding"] = {kFloats, [](DType d) { return F::embedding(randint(0, 10, {2, 3}), make({10, 4}, d)); }};
  m["cat"] = {kAll, [](DType d) { return cat({make({2, 3}, d), make({1, 3}, d)}, 0); }};
  m["stack"] = {kAll, [](DType d) { return stack({make({2, 3}, d), make({2, 3}, d)}, 1); }};
  m["split"] = {kAll, [](DType d) { return split(make({6, 2}, d), 4, 0)[1]; }};
  m["masked_fill"] = {kAll, [](DType d) { return masked_fill(make({2, 3}, d), gt(make({3}, kFloat32), zeros({3})), 1.0); }};
  m["clamp"] = {kAll, [](DType d) { return clamp(make({4}, d), -1, 1); }};  // int bounds keep ints int
  m["clamp_min"] = {kAll, [](DType d) { return clamp_min(make({4}, d), 0); }};
  m["clamp_max"] = {kAll, [](DType d) { return clamp_max(make({4}, d), 0); }};
  m["all"] = {kAll, [](DType d) { return all(make({2, 3}, d), {1}); }, [](DType) { return kBool; }};
  m["any"] = {kAll, [](DType d) { return any(make({2, 3}, d)); }, [](DType) { return kBool; }};
  m["topk"] = {kAll, [](DType d) { return std::get<0>(topk(make({2, 5}, d), 2)); }};
  // The dtype is the output's (the operands are fp8 whatever the scope): autocast leaves it alone.
  m["scaled_mm"] = {{kFloat32, kFloat16, kBFloat16}, [](DType d) {
                      const Tensor a = to_float8(make({16, 32}, kFloat32), kFloat8E4M3FN);
                      const Tensor b = to_float8(make({32, 16}, kFloat32), kFloat8E4M3FN);
                      return scaled_mm(a, b, ones({1}), ones({1}), d);
                    }};
  m["norm"] = {kFloats, [](DType d) { return norm(make({2, 3}, d), 2, {1}); }};
  std::multimap<std::string, Invoker> all(m.begin(), m.end());
  // The registry's samples, on inputs from their domains (log sees positive numbers).
  for (const testing::OpSample& s : testing::all_samples())
    all.emplace(s.op, Invoker{kFloats, [s](DType d) { return s.run(s.inputs(d, false)); }});
  return all;
}

// What the op's policy prescribes for inputs of dtype d under autocast to `low`. nullopt: throws.
std::optional<DType> expected_under_autocast(CastPolicy policy, const Invoker& inv, DType d, DType low) {
  if (policy == CastPolicy::Banned) return std::nullopt;  // raised whatever the inputs' dtype
  const bool eligible = is_floating(d) && d != kFloat64;
  if (!eligible) return inv.result(d);
  switch (policy) {
    case CastPolicy::LowerPrecision: return inv.result(low);
    case CastPolicy::Float32:
    case CastPolicy::Float32OptDtype: return inv.result(kFloat32);
    default: return inv.result(d);  // Promote over inputs of one dtype, Passthrough
  }
}

void check(const std::string& context, const std::string& op, DType d, const std::function<Tensor()>& run,
           std::optional<DType> expected) {
  SCOPED_TRACE(context + ": " + op + " on " + dtype_name(d) + " inputs");
  if (!expected) {
    EXPECT_THROW(run(), Error);
    return;
  }
  Tensor out;
  try {
    out = run();
  } catch (const Error& e) {
    ADD_FAILURE() << "threw: " << e.what();
    return;
  }
  EXPECT_EQ(dtype_name(out.dtype()), std::string(dtype_name(*expected)));
}

TEST_F(AmpTest, EveryOpInTheTableHasAnInvoker) {
  const auto inv = invokers();
  std::set<std::string> table;
  for (const amp::PolicyEntry& e : amp::policy_table()) {
    table.insert(e.op);
    EXPECT_TRUE(inv.count(e.op)) << "op \"" << e.op << "\" has no invoker in test_autocast_dtypes.cpp: add one";
  }
  for (const auto& [op, invoker] : inv) EXPECT_TRUE(table.count(op)) << "an invoker names op \"" << op << "\", not in the table";
}

TEST_F(AmpTest, OutputDtypeOfEveryOpFollowsItsPolicy) {
  manual_seed(7);
  const auto inv = invokers();
  for (const amp::PolicyEntry& e : amp::policy_table()) {
    const auto [first, last] = inv.equal_range(e.op);  // none: reported by EveryOpInTheTableHasAnInvoker
    for (auto it = first; it != last; ++it) {
      const Invoker& f = it->second;
      for (DType d : f.dtypes) {
        auto run = [&] { return f.call(d); };
        check("outside autocast", e.op, d, run, f.result(d));
        for (DType low : {kFloat16, kBFloat16}) {
          amp::AutocastGuard autocast(DeviceType::CPU, low);
          check(std::string("autocast ") + dtype_name(low), e.op, d, run, expected_under_autocast(e.policy, f, d, low));
          amp::AutocastGuard off(DeviceType::CPU, low, /*enabled=*/false);
          check(std::string("enabled=false inside autocast ") + dtype_name(low), e.op, d, run, f.result(d));
        }
        // CUDA autocast leaves CPU tensors alone.
        amp::AutocastGuard cuda(DeviceType::CUDA, kFloat16);
        check("CUDA autocast, CPU tensors", e.op, d, run, f.result(d));
      }
    }
  }
}

}  // namespace
}  // namespace mixtrain::amp_test
