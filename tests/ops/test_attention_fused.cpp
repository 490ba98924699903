// The fused attention kernels (backends/attention.h) and the op's fused path:
// - kernels into poisoned outputs against an fp64 loop reference (forward and the analytic
//   backward) for every dtype, causal and not, odd lengths around the 64-wide tiles and L != S;
// - the public op's fused path against its composite (ops::AttentionPath::Composite)
//   and the reference;
// - gradcheck in fp64 with broadcast batch dims;
// - a dry run's peak against the measured one.
// Thread-count independence: tests/backends/test_cpu_attention.cpp.
#include <cmath>
#include <optional>

#include "backends/attention.h"
#include "mixtrain/config.h"
#include "mixtrain/memory/dry_run.h"
#include "ops/attention_fused.h"
#include "ops/attention_testing.h"
#include "ops/op_reference.h"

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;
using namespace mixtrain::testing;

namespace {

// L in {1, 7, 33, 130} against 64-wide tiles; L != S only where the mask allows (causal is
// top-left aligned, so L != S is allowed there too and tested once each way).
const AttentionSizes kSizes[] = {
    {2, 1, 1, 8, 8, false},     {3, 7, 33, 8, 5, false}, {2, 33, 130, 16, 16, false},
    {1, 130, 7, 8, 12, false},  {2, 1, 1, 8, 8, true},   {2, 33, 33, 8, 8, true},
    {1, 130, 130, 16, 8, true}, {2, 70, 20, 8, 8, true}, {1, 20, 70, 8, 8, true},
};

struct Reference {
  Values out, dq, dk, dv;
};

// Attention and its gradients for grad_out go, in fp64 with plain loops.
Reference reference(const AttentionSizes& z, double scale, const Values& q, const Values& k, const Values& v,
                    const Values& go) {
  Reference r{Values(z.batch * z.l * z.ev), Values(q.size()), Values(k.size()), Values(v.size())};
  for (int64_t b = 0; b < z.batch; ++b) {
    const double *qb = &q[b * z.l * z.e], *kb = &k[b * z.s * z.e], *vb = &v[b * z.s * z.ev], *gb = &go[b * z.l * z.ev];
    for (int64_t i = 0; i < z.l; ++i) {
      const int64_t n = z.causal ? std::min(z.s, i + 1) : z.s;
      std::vector<double> p(n), dp(n);
      double mx = -INFINITY, total = 0, d = 0;
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0;
        for (int64_t t = 0; t < z.e; ++t) dot += qb[i * z.e + t] * kb[j * z.e + t];
        mx = std::max(mx, p[j] = dot * scale);
      }
      for (double& x : p) total += (x = std::exp(x - mx));
      for (double& x : p) x /= total;
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t t = 0; t < z.ev; ++t) {
          r.out[(b * z.l + i) * z.ev + t] += p[j] * vb[j * z.ev + t];
          r.dv[(b * z.s + j) * z.ev + t] += p[j] * gb[i * z.ev + t];
          dp[j] += gb[i * z.ev + t] * vb[j * z.ev + t];
        }
        d += p[j] * dp[j];
      }
      for (int64_t j = 0; j < n; ++j) {
        const double ds = p[j] * (dp[j] - d) * scale;
        for (int64_t t = 0; t < z.e; ++t) {
          r.dq[(b * z.l + i) * z.e + t] += ds * kb[j * z.e + t];
          r.dk[(b * z.s + j) * z.e + t] += ds * qb[i * z.e + t];
        }
      }
    }
  }
  return r;
}

mt::DType lse_dtype(mt::DType dt) { return dt == mt::kFloat64 ? mt::kFloat64 : mt::kFloat32; }

struct KernelResult {
  mt::Tensor out, lse, dq, dk, dv;
};

KernelResult run_kernels(const AttentionSizes& z, double scale, const mt::Tensor& q, const mt::Tensor& k,
                         const mt::Tensor& v, const mt::Tensor& go) {
  const mt::DType dt = q.dtype();
  const mt::backends::AttentionShape sh{z.batch, z.l, z.s, z.e, z.ev, scale, z.causal};
  KernelResult r{poisoned({z.batch, z.l, z.ev}, dt), poisoned({z.batch, z.l}, lse_dtype(dt)),
                 poisoned(q.shape(), dt), poisoned(k.shape(), dt), poisoned(v.shape(), dt)};
  mt::backends::attention_forward(q, q, k, v, sh, r.out, r.lse);
  mt::backends::attention_backward(q, q, k, v, r.out, go, r.lse, sh, r.dq, r.dk, r.dv);
  return r;
}

}  // namespace

TEST(AttentionFused, KernelsMatchReferenceIntoPoisonedOutputs) {
  for (const AttentionSizes& z : kSizes) {
    for (mt::DType dt : float_types()) {
      SCOPED_TRACE(name_of(z, dt));
      const double scale = 1.0 / std::sqrt(static_cast<double>(z.e));
      const AttentionInputs in = attention_inputs(z, dt, 40);
      const KernelResult r = run_kernels(z, scale, in.q, in.k, in.v, in.go);
      const Reference ref = reference(z, scale, to_doubles(in.q), to_doubles(in.k), to_doubles(in.v), to_doubles(in.go));
      const Tolerance tol = tolerance_for(dt);
      EXPECT_TRUE(all_close(r.out, ref.out, tol)) << "out";
      EXPECT_TRUE(all_finite(r.lse)) << "lse";
      EXPECT_TRUE(all_close(r.dq, ref.dq, tol)) << "grad q";
      EXPECT_TRUE(all_close(r.dk, ref.dk, tol)) << "grad k";
      EXPECT_TRUE(all_close(r.dv, ref.dv, tol)) << "grad v";
    }
  }
}

// lse is the logsumexp of each query's scaled scores, what backward recomputes from.
TEST(AttentionFused, LogsumexpIsTheRowsLogSumExp) {
  const AttentionSizes z{1, 5, 70, 4, 4, false};
  const AttentionInputs in = attention_inputs(z, mt::kFloat64, 50);
  const KernelResult r = run_kernels(z, 0.5, in.q, in.k, in.v, in.go);
  const Values q = to_doubles(in.q), k = to_doubles(in.k), lse = to_doubles(r.lse);
  for (int64_t i = 0; i < z.l; ++i) {
    double total = 0;
    for (int64_t j = 0; j < z.s; ++j) {
      double dot = 0;
      for (int64_t t = 0; t < z.e; ++t) dot += q[i * z.e + t] * k[j * z.e + t];
      total += std::exp(0.5 * dot);
    }
    EXPECT_NEAR(lse[i], std::log(total), 1e-12);
  }
}

TEST(AttentionFused, OpMatchesCompositeAndReferenceForwardAndBackward) {
  for (const AttentionSizes& z : kSizes) {
    for (mt::DType dt : float_types()) {
      SCOPED_TRACE(name_of(z, dt));
      const AttentionInputs in = attention_inputs(z, dt, 60);
      const double scale = 0.3;
      const Reference ref = reference(z, scale, to_doubles(in.q), to_doubles(in.k), to_doubles(in.v), to_doubles(in.go));
      auto run = [&](bool fused) {
        std::vector<mt::Tensor> x{in.q.detach().set_requires_grad(true), in.k.detach().set_requires_grad(true),
                                  in.v.detach().set_requires_grad(true)};
        std::optional<CompositeOnly> composite;
        if (!fused) composite.emplace();
        mt::Tensor out = F::scaled_dot_product_attention(x[0], x[1], x[2], mt::Tensor(), 0.0, z.causal, scale);
        out.backward(in.go);
        x.insert(x.begin(), out);
        return x;
      };
      const std::vector<mt::Tensor> fused = run(true), composite = run(false);
      const Tolerance tol = tolerance_for(dt);
      EXPECT_EQ(fused[0].dtype(), dt);
      EXPECT_TRUE(all_close(fused[0], ref.out, tol)) << "fused out";
      EXPECT_TRUE(all_close(composite[0], ref.out, tol)) << "composite out";
      EXPECT_TRUE(all_close(fused[0], composite[0], tol)) << "fused vs composite";
      const Values* grads[] = {&ref.dq, &ref.dk, &ref.dv};
      for (int g = 0; g < 3; ++g) {
        EXPECT_EQ(fused[g + 1].grad().dtype(), dt);
        EXPECT_TRUE(all_close(fused[g + 1].grad(), *grads[g], tol)) << "fused grad " << g;
        EXPECT_TRUE(all_close(composite[g + 1].grad(), *grads[g], tol)) << "composite grad " << g;
      }
    }
  }
}

// Broadcast batch dims (shared k and v across heads), a non-contiguous q, default scale.
TEST(AttentionFused, GradcheckWithBroadcastAndNonContiguousInputs) {
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    std::vector<mt::Tensor> in{random_tensor({2, 3, 5, 67}, mt::kFloat64, 70).transpose(-1, -2),  // [2, 3, 67, 5]
                               random_tensor({2, 1, causal ? 67 : 9, 5}, mt::kFloat64, 71),
                               random_tensor({1, causal ? 67 : 9, 3}, mt::kFloat64, 72)};
    EXPECT_TRUE(gradcheck(
        [&](const std::vector<mt::Tensor>& x) {
          return F::scaled_dot_product_attention(x[0], x[1], x[2], mt::Tensor(), 0.0, causal);
        },
        in));
  }
}

TEST(AttentionFused, MaskKeepsTheComposite) {
  EXPECT_TRUE(mt::backends::attention_forward.has(mt::DeviceType::CPU));
  // CUDA builds have the fused kernels too (tests/backends/test_cuda_attention.cpp).
#ifdef MIXTRAIN_WITH_CUDA
  EXPECT_TRUE(mt::backends::attention_forward.has(mt::DeviceType::CUDA));
#else
  EXPECT_FALSE(mt::backends::attention_forward.has(mt::DeviceType::CUDA));
#endif
  // The fused node's name tells the paths apart.
  auto node = [](const mt::Tensor& t) { return std::string(t.grad_fn()->name()); };
  const mt::Tensor q = mt::randn({1, 3, 4}).set_requires_grad(true), k = mt::randn({1, 5, 4}), v = mt::randn({1, 5, 4});
  EXPECT_EQ(node(F::scaled_dot_product_attention(q, k, v)), "ScaledDotProductAttentionBackward0");
  const mt::Tensor mask = mt::ones({3, 5}).to(mt::kBool);
  EXPECT_NE(node(F::scaled_dot_product_attention(q, k, v, mask)), "ScaledDotProductAttentionBackward0");
  // Dropout is applied inside the fused kernels (tests/ops/test_attention_dropout.cpp).
  EXPECT_EQ(node(F::scaled_dot_product_attention(q, k, v, mt::Tensor(), 0.5)),
            "ScaledDotProductAttentionBackward0");
  {
    CompositeOnly composite;
    EXPECT_NE(node(F::scaled_dot_product_attention(q, k, v)), "ScaledDotProductAttentionBackward0");
  }
}

// A dry run of the fused path predicts the CPU allocator's peak for forward + backward, the
// kernel's fp32 copies of half operands included (the meta backend models them). Dropout, drawn
// inside the kernels, adds no memory on either side.
TEST(AttentionFused, DryRunPredictsTheMeasuredPeak) {
  for (const auto& [dt, p] :
       {std::pair{mt::kFloat32, 0.0}, std::pair{mt::kBFloat16, 0.0}, std::pair{mt::kBFloat16, 0.1}}) {
    SCOPED_TRACE(std::string(mt::dtype_name(dt)) + " dropout " + std::to_string(p));
    const mt::Shape qs{2, 3, 100, 16}, ks{2, 3, 90, 16};
    auto step = [p = p](const mt::Tensor& q, const mt::Tensor& k, const mt::Tensor& v, const mt::Tensor& go) {
      F::scaled_dot_product_attention(q, k, v, mt::Tensor(), p).backward(go);
    };
    const mt::Device cpu = mt::Device::cpu();
    const int64_t before = mt::memory::stats(cpu).allocated_bytes;
    int64_t real = 0;
    {
      const mt::Tensor q = random_tensor(qs, dt, 1).set_requires_grad(true), k = random_tensor(ks, dt, 2).set_requires_grad(true),
                       v = random_tensor(ks, dt, 3).set_requires_grad(true), go = random_tensor(qs, dt, 4);
      mt::memory::reset_peak_stats(cpu);
      step(q, k, v, go);
      real = mt::memory::stats(cpu).peak_allocated_bytes - before;
    }
    const mt::TensorOptions meta = mt::TensorOptions(dt).device(mt::Device::meta());
    const mt::Tensor q = mt::empty(qs, meta).set_requires_grad(true), k = mt::empty(ks, meta).set_requires_grad(true),
                     v = mt::empty(ks, meta).set_requires_grad(true), go = mt::empty(qs, meta);
    const int64_t predicted = mt::memory::dry_run(cpu, [&] { step(q, k, v, go); }).peak_bytes();
    EXPECT_NEAR(static_cast<double>(predicted), static_cast<double>(real), 0.01 * static_cast<double>(real));
  }
}

// The measured table (attention_fused.cpp): CUDA fp16 and bf16 up to the longest measured length
// take the composite, everything else the fused kernels; a dry run for a CUDA target plans what
// the GPU runs (tested on meta tensors, so in a build without CUDA too), and a forced path wins.
TEST(AttentionFused, CudaTakesTheCompositeWhereItMeasuredFaster) {
  using mt::DeviceType;
  for (mt::DType dt : {mt::kFloat16, mt::kBFloat16}) {
    EXPECT_FALSE(mt::ops::fused_attention_measured_faster(DeviceType::CUDA, dt, 128, 128)) << mt::dtype_name(dt);
    EXPECT_FALSE(mt::ops::fused_attention_measured_faster(DeviceType::CUDA, dt, 1, 1024)) << mt::dtype_name(dt);
    EXPECT_TRUE(mt::ops::fused_attention_measured_faster(DeviceType::CUDA, dt, 2048, 2048)) << mt::dtype_name(dt);
    EXPECT_TRUE(mt::ops::fused_attention_measured_faster(DeviceType::CPU, dt, 128, 128)) << mt::dtype_name(dt);
  }
  EXPECT_TRUE(mt::ops::fused_attention_measured_faster(DeviceType::CUDA, mt::kFloat32, 128, 128));

  auto planned_node = [](mt::DType dt, int64_t len) {
    const mt::TensorOptions meta = mt::TensorOptions(dt).device(mt::Device::meta());
    std::string name;
    mt::memory::dry_run(mt::Device::cuda(), [&] {
      const mt::Tensor q = mt::empty({2, 4, len, 64}, meta).set_requires_grad(true);
      name = F::scaled_dot_product_attention(q, q, q, mt::Tensor(), 0.0, true).grad_fn()->name();
    });
    return name;
  };
  const std::string fused = "ScaledDotProductAttentionBackward0";
  EXPECT_NE(planned_node(mt::kFloat16, 128), fused);
  EXPECT_NE(planned_node(mt::kBFloat16, 1024), fused);
  EXPECT_EQ(planned_node(mt::kBFloat16, 1025), fused);
  EXPECT_EQ(planned_node(mt::kFloat32, 128), fused);
  {
    FusedOnly kernels;
    EXPECT_EQ(planned_node(mt::kFloat16, 128), fused);
  }
  {
    CompositeOnly composite;
    EXPECT_NE(planned_node(mt::kFloat32, 128), fused);
  }
}
