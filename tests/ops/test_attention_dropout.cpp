// Dropout inside the fused attention kernels (backends/attention.h, cpu/attention.cpp):
// - the kernels into poisoned outputs against an fp64 loop reference that applies the mask the
//   shape names (dropout_keep at offset + (b * L + i) * S + j, 1 / (1 - p) rounded to the dtype),
//   for every dtype, causal and not, lengths across the 64/256-wide tiles;
// - the public op's fused path against its composite (matmul, softmax, dropout(), matmul) at the
//   same seed: output, the three gradients and the generator state after the call, with
//   broadcast batch dims;
// - dropout really drops: results differ from p = 0, and p = 0 takes no draws.
// Thread-count independence with dropout: tests/backends/test_cpu_attention.cpp.
#include <cmath>
#include <optional>

#include "backends/attention.h"
#include "ops/attention_fused.h"
#include "ops/attention_testing.h"
#include "ops/op_reference.h"

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;
using namespace mixtrain::testing;

namespace {

struct Reference {
  Values out, dq, dk, dv;
};

// 1 / (1 - p) as the dtype stores it: what dropout() multiplies kept elements by.
double kept_factor(double p, mt::DType dt) {
  return to_doubles(mt::full({1}, 1.0 / (1.0 - p), mt::TensorOptions(dt)))[0];
}

// Attention with dropout on the probabilities and its gradients for grad_out go, fp64 loops.
Reference reference(const AttentionSizes& z, const mt::backends::AttentionShape& sh, double kept, const Values& q,
                    const Values& k, const Values& v, const Values& go) {
  Reference r{Values(z.batch * z.l * z.ev), Values(q.size()), Values(k.size()), Values(v.size())};
  const float threshold = static_cast<float>(sh.dropout_p);
  for (int64_t b = 0; b < z.batch; ++b) {
    const double *qb = &q[b * z.l * z.e], *kb = &k[b * z.s * z.e], *vb = &v[b * z.s * z.ev], *gb = &go[b * z.l * z.ev];
    for (int64_t i = 0; i < z.l; ++i) {
      const int64_t n = z.causal ? std::min(z.s, i + 1) : z.s;
      std::vector<double> p(n), f(n), dp(n);
      double mx = -INFINITY, total = 0, d = 0;
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0;
        for (int64_t t = 0; t < z.e; ++t) dot += qb[i * z.e + t] * kb[j * z.e + t];
        mx = std::max(mx, p[j] = dot * sh.scale);
        const uint64_t draw = sh.offset + static_cast<uint64_t>((b * z.l + i) * z.s + j);
        f[j] = mt::dropout_keep(sh.seed, draw, threshold) ? kept : 0.0;
      }
      for (double& x : p) total += (x = std::exp(x - mx));
      for (double& x : p) x /= total;
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t t = 0; t < z.ev; ++t) {
          r.out[(b * z.l + i) * z.ev + t] += p[j] * f[j] * vb[j * z.ev + t];
          r.dv[(b * z.s + j) * z.ev + t] += p[j] * f[j] * gb[i * z.ev + t];
          dp[j] += gb[i * z.ev + t] * vb[j * z.ev + t];
        }
        d += p[j] * f[j] * dp[j];
      }
      for (int64_t j = 0; j < n; ++j) {
        const double ds = p[j] * (f[j] * dp[j] - d) * sh.scale;
        for (int64_t t = 0; t < z.e; ++t) {
          r.dq[(b * z.l + i) * z.e + t] += ds * kb[j * z.e + t];
          r.dk[(b * z.s + j) * z.e + t] += ds * qb[i * z.e + t];
        }
      }
    }
  }
  return r;
}

}  // namespace

TEST(AttentionDropout, KernelsMatchReferenceIntoPoisonedOutputs) {
  // Odd lengths, and 130 / 300 across the 64-wide and 256-wide tiles of both passes.
  const AttentionSizes sizes[] = {{2, 7, 13, 8, 5, false},
                                  {2, 33, 17, 8, 8, true},
                                  {1, 130, 300, 16, 8, false},
                                  {1, 300, 130, 8, 8, true},
                                  {2, 7, 13, 8, 8, true}};
  for (const AttentionSizes& z : sizes) {
    for (mt::DType dt : float_types()) {
      SCOPED_TRACE(name_of(z, dt));
      mt::backends::AttentionShape sh{z.batch, z.l, z.s, z.e, z.ev, 0.4, z.causal};
      sh.dropout_p = 0.3;
      sh.seed = 1234;
      sh.offset = 77;  // not 0: the offset must shift every draw
      const AttentionInputs in = attention_inputs(z, dt, 90);
      const mt::DType lse_dt = dt == mt::kFloat64 ? mt::kFloat64 : mt::kFloat32;
      mt::Tensor out = poisoned({z.batch, z.l, z.ev}, dt), lse = poisoned({z.batch, z.l}, lse_dt),
                 dq = poisoned(in.q.shape(), dt), dk = poisoned(in.k.shape(), dt), dv = poisoned(in.v.shape(), dt);
      mt::backends::attention_forward(in.q, in.q, in.k, in.v, sh, out, lse);
      mt::backends::attention_backward(in.q, in.q, in.k, in.v, out, in.go, lse, sh, dq, dk, dv);
      const Reference ref = reference(z, sh, kept_factor(sh.dropout_p, dt), to_doubles(in.q), to_doubles(in.k),
                                      to_doubles(in.v), to_doubles(in.go));
      const Tolerance tol = tolerance_for(dt);
      EXPECT_TRUE(all_close(out, ref.out, tol)) << "out";
      EXPECT_TRUE(all_finite(lse)) << "lse";
      EXPECT_TRUE(all_close(dq, ref.dq, tol)) << "grad q";
      EXPECT_TRUE(all_close(dk, ref.dk, tol)) << "grad k";
      EXPECT_TRUE(all_close(dv, ref.dv, tol)) << "grad v";
    }
  }
}

// The same seed gives the same mask on both paths, and both leave the generator where the
// composite's dropout() does. k and v broadcast over the heads: the mask indexes the broadcast
// [2, 3, L, S] probabilities on both paths.
TEST(AttentionDropout, OpFusedMatchesCompositeAtTheSameSeed) {
  const std::pair<int64_t, int64_t> lengths[] = {{7, 13}, {33, 17}};
  for (const auto& [l, s] : lengths) {
    for (bool causal : {false, true}) {
      for (mt::DType dt : {mt::kFloat64, mt::kFloat32, mt::kBFloat16}) {
        SCOPED_TRACE(std::string(mt::dtype_name(dt)) + " L" + std::to_string(l) + " S" + std::to_string(s) +
                     (causal ? " causal" : ""));
        const std::vector<mt::Tensor> in{random_tensor({2, 3, l, 8}, dt, 10, -1.5, 1.5),
                                         random_tensor({2, 1, s, 8}, dt, 11, -1.5, 1.5), random_tensor({s, 6}, dt, 12),
                                         random_tensor({2, 3, l, 6}, dt, 13)};
        struct Run {
          std::vector<mt::Tensor> x;
          mt::Tensor out;
          mt::GeneratorState after;
          std::string node;
        };
        auto run = [&](bool fused) {
          Run r;
          for (int i = 0; i < 3; ++i) r.x.push_back(in[i].detach().set_requires_grad(true));
          std::optional<CompositeOnly> composite;
          if (!fused) composite.emplace();
          mt::manual_seed(2024);
          r.out = F::scaled_dot_product_attention(r.x[0], r.x[1], r.x[2], mt::Tensor(), 0.25, causal, 0.5);
          r.after = mt::default_generator().state();
          r.node = r.out.grad_fn()->name();
          r.out.backward(in[3]);
          return r;
        };
        const Run fused = run(true), composite = run(false);
        EXPECT_EQ(fused.node, "ScaledDotProductAttentionBackward0");
        EXPECT_NE(composite.node, "ScaledDotProductAttentionBackward0");
        EXPECT_EQ(fused.after.seed, composite.after.seed);
        EXPECT_EQ(fused.after.offset, composite.after.offset) << "draws taken";
        EXPECT_EQ(fused.after.offset, static_cast<uint64_t>(2 * 3 * l * s));
        // The composite rounds half probabilities to the dtype before dropout (and the scores
        // before the softmax), the fused path keeps them in fp32: both within the dtype's tolerance.
        const Tolerance tol = tolerance_for(dt);
        EXPECT_EQ(fused.out.dtype(), dt);
        EXPECT_TRUE(all_close(fused.out, to_doubles(composite.out), tol)) << "out";
        for (int g = 0; g < 3; ++g) {
          ASSERT_TRUE(fused.x[g].grad().defined());
          EXPECT_EQ(fused.x[g].grad().dtype(), dt);
          EXPECT_TRUE(all_close(fused.x[g].grad(), to_doubles(composite.x[g].grad()), tol)) << "grad of input " << g;
        }
      }
    }
  }
}

// A mask that dropped nothing (or a kernel that ignored dropout_p) would pass a comparison of
// two paths that both did so: dropout must change the output and every gradient, and p = 0
// must take no draws and give the undropped result.
TEST(AttentionDropout, DropoutChangesResultsAndZeroTakesNoDraws) {
  const std::vector<mt::Tensor> in{
      random_tensor({2, 9, 8}, mt::kFloat64, 20), random_tensor({2, 11, 8}, mt::kFloat64, 21),
      random_tensor({2, 11, 4}, mt::kFloat64, 22), random_tensor({2, 9, 4}, mt::kFloat64, 23)};
  auto run = [&](double p) {
    std::vector<mt::Tensor> x;
    for (int i = 0; i < 3; ++i) x.push_back(in[i].detach().set_requires_grad(true));
    mt::manual_seed(5);
    mt::Tensor out = F::scaled_dot_product_attention(x[0], x[1], x[2], mt::Tensor(), p);
    EXPECT_EQ(std::string(out.grad_fn()->name()), "ScaledDotProductAttentionBackward0");
    out.backward(in[3]);
    EXPECT_EQ(mt::default_generator().state().offset, p > 0 ? 2u * 9 * 11 : 0u) << "p = " << p;
    return std::vector<Values>{to_doubles(out), to_doubles(x[0].grad()), to_doubles(x[1].grad()),
                               to_doubles(x[2].grad())};
  };
  const std::vector<Values> plain = run(0.0), dropped = run(0.5), again = run(0.5);
  const char* names[] = {"out", "grad q", "grad k", "grad v"};
  for (int t = 0; t < 4; ++t) {
    SCOPED_TRACE(names[t]);
    int64_t differ = 0;
    for (size_t i = 0; i < plain[t].size(); ++i) differ += std::abs(plain[t][i] - dropped[t][i]) > 1e-6;
    EXPECT_GT(differ, static_cast<int64_t>(plain[t].size()) / 2) << "of " << plain[t].size();
    EXPECT_EQ(dropped[t], again[t]) << "same seed, same result";
  }
  // p = 0 is the plain fused path: the reference without dropout.
  const AttentionSizes z{2, 9, 11, 8, 4, false};
  mt::backends::AttentionShape sh{2, 9, 11, 8, 4, 1.0 / std::sqrt(8.0), false};
  const Reference ref =
      reference(z, sh, 1.0, to_doubles(in[0]), to_doubles(in[1]), to_doubles(in[2]), to_doubles(in[3]));
  ASSERT_EQ(plain[0].size(), ref.out.size());
  for (size_t i = 0; i < ref.out.size(); ++i) EXPECT_NEAR(plain[0][i], ref.out[i], 1e-12) << i;
}
