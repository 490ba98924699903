// scaled_dot_product_attention against an fp64 loop reference for every dtype: plain, causal
// (square and L != S), bool padding masks, additive float masks, custom scale, broadcast batch
// dims; gradients against the reference's derivative and gradcheck in fp64; fully masked rows;
// dropout inside attention; and the statistics of dropout itself; errors.
#include <cmath>
#include <limits>

#include "ops/attention_fused.h"
#include "ops/op_reference.h"

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;
using namespace mixtrain::testing;

namespace {

enum class MaskKind { None, Causal, Bool, Additive };

struct AttnCase {
  mt::Shape q, k, v;  // [..., L, E], [..., S, E], [..., S, Ev]; batch dims broadcast
  MaskKind mask;
  mt::Shape mask_shape;  // broadcasts to [..., L, S]
  std::optional<double> scale;
};

// Index of a broadcast operand: batch index b of the output's flattened batch dims, for an
// operand whose batch dims (right-aligned) may be 1.
int64_t batch_offset(const mt::Shape& out_batch, const mt::Shape& shape, int64_t b, int64_t matrix) {
  const int64_t nb = static_cast<int64_t>(shape.size()) - 2, lead = static_cast<int64_t>(out_batch.size()) - nb;
  int64_t off = 0, stride = matrix, rem = b;
  std::vector<int64_t> idx(out_batch.size());
  for (int64_t d = static_cast<int64_t>(out_batch.size()) - 1; d >= 0; --d) idx[d] = rem % out_batch[d], rem /= out_batch[d];
  for (int64_t d = nb - 1; d >= 0; --d) {
    if (shape[d] != 1) off += idx[d + lead] * stride;
    stride *= shape[d];
  }
  return off;
}

// in: q, k, v, then the mask values (bool as 0/1, or additive) when there is one.
Values attention_ref(const AttnCase& c, const std::vector<Values>& in) {
  const int64_t l = c.q[c.q.size() - 2], e = c.q.back(), s = c.k[c.k.size() - 2], ev = c.v.back();
  mt::Shape batch(c.q.begin(), c.q.end() - 2);
  for (const mt::Shape* sh : {&c.k, &c.v}) batch = mt::broadcast_shapes(batch, mt::Shape(sh->begin(), sh->end() - 2), "ref");
  const double scale = c.scale.value_or(1.0 / std::sqrt(static_cast<double>(e)));
  mt::Shape mask_full = c.mask_shape;  // the mask as a [..., L, S] operand
  while (mask_full.size() < batch.size() + 2) mask_full.insert(mask_full.begin(), 1);
  Values out;
  for (int64_t b = 0; b < mt::shape_numel(batch); ++b) {
    const double* q = in[0].data() + batch_offset(batch, c.q, b, l * e);
    const double* k = in[1].data() + batch_offset(batch, c.k, b, s * e);
    const double* v = in[2].data() + batch_offset(batch, c.v, b, s * ev);
    for (int64_t i = 0; i < l; ++i) {
      std::vector<double> p(s);
      double mx = -INFINITY;
      for (int64_t j = 0; j < s; ++j) {
        double dot = 0;
        for (int64_t t = 0; t < e; ++t) dot += q[i * e + t] * k[j * e + t];
        p[j] = dot * scale;
        if (c.mask == MaskKind::Causal && j > i) p[j] = -INFINITY;
        if (c.mask == MaskKind::Bool || c.mask == MaskKind::Additive) {
          const int64_t mi = mask_full[mask_full.size() - 2] == 1 ? 0 : i, mj = mask_full.back() == 1 ? 0 : j;
          const double m = in[3][batch_offset(batch, mask_full, b, mask_full[mask_full.size() - 2] * mask_full.back()) +
                                 mi * mask_full.back() + mj];
          if (c.mask == MaskKind::Bool && m == 0) p[j] = -INFINITY;
          if (c.mask == MaskKind::Additive) p[j] += m;
        }
        mx = std::max(mx, p[j]);
      }
      double total = 0;
      for (double& x : p) total += (x = std::exp(x - mx));
      for (int64_t t = 0; t < ev; ++t) {
        double acc = 0;
        for (int64_t j = 0; j < s; ++j) acc += p[j] / total * v[j * ev + t];
        out.push_back(acc);
      }
    }
  }
  return out;
}

const AttnCase kCases[] = {
    {{2, 2, 3, 4}, {2, 2, 5, 4}, {2, 2, 5, 3}, MaskKind::None, {}, std::nullopt},
    {{1, 2, 4, 3}, {1, 2, 4, 3}, {1, 2, 4, 3}, MaskKind::Causal, {}, std::nullopt},
    {{2, 3, 4}, {2, 5, 4}, {2, 5, 2}, MaskKind::Causal, {}, 0.7},          // L < S: top-left aligned
    {{2, 2, 3, 4}, {2, 1, 5, 4}, {2, 1, 5, 4}, MaskKind::Bool, {2, 1, 1, 5}, std::nullopt},  // padding, shared kv
    {{1, 2, 3, 2}, {1, 2, 4, 2}, {1, 2, 4, 3}, MaskKind::Additive, {3, 4}, std::nullopt},
};

// A padding mask with at least one attended key per batch (a fully masked row is NaN by design).
mt::Tensor padding_mask(const mt::Shape& shape) {
  std::vector<bool> keep(mt::shape_numel(shape));
  for (size_t i = 0; i < keep.size(); ++i) keep[i] = (i % 5) < 3 + (i / 5) % 2;  // first 3 or 4 of 5 keys
  std::vector<int64_t> as_int(keep.begin(), keep.end());
  return mt::from_vector(as_int, shape).to(mt::kBool);
}

std::vector<mt::Tensor> case_inputs(const AttnCase& c, mt::DType dt, uint64_t seed) {
  std::vector<mt::Tensor> in{random_tensor(c.q, dt, seed, -1.5, 1.5), random_tensor(c.k, dt, seed + 1, -1.5, 1.5),
                             random_tensor(c.v, dt, seed + 2)};
  if (c.mask == MaskKind::Bool) in.push_back(padding_mask(c.mask_shape));
  if (c.mask == MaskKind::Additive) in.push_back(random_tensor(c.mask_shape, dt, seed + 3, -2, 0));
  return in;
}

mt::Tensor run_case(const AttnCase& c, const std::vector<mt::Tensor>& in, double dropout_p = 0.0) {
  const mt::Tensor mask = in.size() > 3 ? in[3] : mt::Tensor();
  return F::scaled_dot_product_attention(in[0], in[1], in[2], mask, dropout_p, c.mask == MaskKind::Causal, c.scale);
}

}  // namespace

TEST(Attention, MatchesReferenceForEveryDtypeAndMask) {
  int index = 0;
  for (const AttnCase& c : kCases) {
    for (mt::DType dt : float_types()) {
      auto op = [&](const std::vector<mt::Tensor>& in) { return run_case(c, in); };
      auto ref = [&](const std::vector<Values>& in) { return attention_ref(c, in); };
      std::vector<size_t> wrt{0, 1, 2};
      if (c.mask == MaskKind::Additive) wrt.push_back(3);  // a learned bias gets its gradient
      check_op("attention case " + std::to_string(index) + " " + mt::dtype_name(dt), op, ref, case_inputs(c, dt, 10),
               wrt, tolerance_for(dt));
    }
    ++index;
  }
}

TEST(Attention, GradcheckWithMasksAndNonContiguousInputs) {
  for (const AttnCase& c : kCases) {
    std::vector<mt::Tensor> in = case_inputs(c, mt::kFloat64, 20);
    // q as a transposed view of its storage.
    mt::Shape qt = c.q;
    std::swap(qt[qt.size() - 1], qt[qt.size() - 2]);
    in[0] = random_tensor(qt, mt::kFloat64, 21).transpose(-1, -2);
    EXPECT_TRUE(gradcheck([&](const std::vector<mt::Tensor>& x) { return run_case(c, x); }, in));
  }
}

TEST(Attention, HalfOutputKeepsDtypeAndFullyMaskedRowsAreNaN) {
  const AttnCase& c = kCases[0];
  auto in = case_inputs(c, mt::kBFloat16, 30);
  EXPECT_EQ(run_case(c, in).dtype(), mt::kBFloat16);
  mt::Tensor q = mt::randn({1, 2, 4}), k = mt::randn({1, 3, 4}), v = mt::randn({1, 3, 4});
  std::vector<int64_t> keep{1, 1, 1, 0, 0, 0};  // query 1 may attend to nothing
  mt::Tensor mask = mt::from_vector(keep, {1, 2, 3}).to(mt::kBool);
  const Values out = to_doubles(F::scaled_dot_product_attention(q, k, v, mask));
  for (int t = 0; t < 4; ++t) EXPECT_TRUE(std::isfinite(out[t]));
  for (int t = 4; t < 8; ++t) EXPECT_TRUE(std::isnan(out[t]));
}

TEST(Attention, DropoutDropsWeightsAndRescalesTheRest) {
  // v = 1: each output is the sum of the row's attention weights after dropout, 1 on average.
  mt::manual_seed(7);
  mt::Tensor q = mt::randn({64, 8, 4}), k = mt::randn({64, 16, 4}), v = mt::ones({64, 16, 1});
  const Values out = to_doubles(F::scaled_dot_product_attention(q, k, v, {}, 0.25));
  double mean = 0;
  int differs = 0;
  for (double o : out) mean += o / out.size(), differs += std::abs(o - 1.0) > 1e-6;
  EXPECT_NEAR(mean, 1.0, 0.05);  // 512 rows, each with std ~0.15: 5 sigma is about 0.035
  EXPECT_GT(differs, 400);
  mt::manual_seed(7);
  mt::Tensor q2 = mt::randn({64, 8, 4}), k2 = mt::randn({64, 16, 4});
  EXPECT_EQ(to_doubles(F::scaled_dot_product_attention(q2, k2, v, {}, 0.25)), out) << "same seed, same mask";
}

TEST(Dropout, KeepsOneMinusPAndScalesByItsInverse) {
  mt::manual_seed(3);
  const int64_t n = 200000;
  const double p = 0.3;
  for (mt::DType dt : {mt::kFloat32, mt::kFloat16}) {
    mt::Tensor x = mt::ones({n}, mt::TensorOptions(dt).requires_grad(true));
    mt::Tensor y = F::dropout(x, p, /*training=*/true);
    const Values yv = to_doubles(y);
    const double scale = to_doubles(mt::full({}, 1.0 / (1.0 - p), mt::TensorOptions(dt)))[0];
    int64_t kept = 0, other = 0;
    for (double v : yv) kept += v == scale, other += v != scale && v != 0.0;
    EXPECT_EQ(other, 0) << dt;
    // Kept fraction 0.7 with standard deviation sqrt(0.21 / n) ~ 0.001: allow 5 sigma.
    EXPECT_NEAR(static_cast<double>(kept) / n, 1.0 - p, 0.005) << dt;
    y.sum().backward();
    EXPECT_EQ(to_doubles(x.grad()), yv) << "the gradient is the same mask and scale";
  }
  mt::Tensor x = mt::randn({10});
  EXPECT_TRUE(F::dropout(x, 0.5, /*training=*/false).is_same(x));
  EXPECT_EQ(to_doubles(F::dropout(x, 1.0, true)), Values(10, 0.0));
  EXPECT_THROW(F::dropout(x, 1.5, true), mt::Error);
}

TEST(Attention, BadArgumentsRaiseErrorsNamingTheOp) {
  const mt::Tensor q = mt::randn({2, 3, 4}), k = mt::randn({2, 5, 4}), v = mt::randn({2, 5, 6});
  const char* op = "scaled_dot_product_attention: ";
  expect_error([&] { F::scaled_dot_product_attention(q, mt::randn({2, 5, 3}), v); }, std::string(op) + "query [2, 3, 4]");
  expect_error([&] { F::scaled_dot_product_attention(q, k, mt::randn({2, 4, 6})); }, "do not fit");
  expect_error([&] { F::scaled_dot_product_attention(q, k.to(mt::kFloat16), v); }, "must have the same dtype");
  expect_error([&] { F::scaled_dot_product_attention(q, k, v, mt::ones({3, 4}, mt::kBool)); },
               "attn_mask [3, 4] bool cpu does not broadcast to the attention scores [2, 3, 5]");
  expect_error([&] { F::scaled_dot_product_attention(q, k, v, mt::ones({3, 5}, mt::kInt64)); },
               "attn_mask must be bool");
  expect_error([&] { F::scaled_dot_product_attention(q, k, v, mt::ones({3, 5}, mt::kBool), 0.0, true); },
               "either attn_mask or is_causal");
  expect_error([&] { F::scaled_dot_product_attention(q, k, v, {}, 1.0); }, "dropout_p must be in [0, 1)");
}

TEST(Attention, CausalKernelMaskEqualsAnExplicitMask) {
  // is_causal masks inside the softmax kernel; a bool tril mask goes through where. Forward values
  // agree bit for bit in every dtype (masked entries add exact zeros to the sums); fp32 gradients
  // too, half ones within the dtype's tolerance (the kernel path keeps half probabilities). The
  // composite's causal path, so with the fused one off (test_attention_fused.cpp tests that).
  mt::ops::set_attention_path(mt::ops::AttentionPath::Composite);
  for (mt::DType dt : float_types()) {
    SCOPED_TRACE(mt::dtype_name(dt));
    const int64_t l = 5, s = 8;
    std::vector<mt::Tensor> a{random_tensor({2, 3, l, 4}, dt, 40, -1.5, 1.5), random_tensor({2, 3, s, 4}, dt, 41, -1.5, 1.5),
                              random_tensor({2, 3, s, 6}, dt, 42)};
    std::vector<mt::Tensor> b;
    for (auto& t : a) {
      t.set_requires_grad(true);
      b.push_back(t.detach().clone().set_requires_grad(true));
    }
    const mt::Tensor tril = mt::ge(mt::arange(0, l).reshape({l, 1}), mt::arange(0, s).reshape({1, s}));
    const mt::Tensor out_causal = F::scaled_dot_product_attention(a[0], a[1], a[2], {}, 0.0, true);
    const mt::Tensor out_mask = F::scaled_dot_product_attention(b[0], b[1], b[2], tril);
    EXPECT_EQ(to_doubles(out_causal), to_doubles(out_mask));
    const mt::Tensor g = random_tensor(out_causal.shape(), dt, 43);
    (out_causal * g).sum().backward();
    (out_mask * g).sum().backward();
    for (size_t i = 0; i < 3; ++i) {
      if (dt == mt::kFloat32 || dt == mt::kFloat64) EXPECT_EQ(to_doubles(a[i].grad()), to_doubles(b[i].grad())) << i;
      else EXPECT_TRUE(mt::testing::all_close(a[i].grad(), to_doubles(b[i].grad()), tolerance_for(dt))) << i;
    }
  }
  mt::ops::set_attention_path(mt::ops::AttentionPath::Measured);
}
