// CUDA fused attention (backends/attention.h): forward (out, lse) and backward (dq, dk, dv) into
// NaN-poisoned outputs against the CPU kernel run on fp64 copies of the same inputs, for every
// dtype, causal and not, L != S, odd lengths around the tiles, head dims of the tensor-core
// kernels (fp16/bf16 at 64, 128, and 32 with Ev 128), of the generic ones only (24, 40, E != Ev)
// and one that needs more than 48 KB of shared memory (256); results the same bits run to run;
// dropout (the generic kernels, tensor-core head dims included) against the CPU kernel at the same
// seed; and the public op on CUDA, fused against composite, with and without dropout.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "backends/attention.h"
#include "backends/cuda_test_util.h"
#include "ops/attention_fused.h"
#include "ops/attention_testing.h"

namespace mixtrain::testing {
namespace {

namespace F = nn::functional;

struct Case {
  int64_t batch, l, s, e, ev;
  bool causal;
};

std::string name_of(const Case& c, DType dt) {
  return std::string(dtype_name(dt)) + " B" + std::to_string(c.batch) + " L" + std::to_string(c.l) + " S" +
         std::to_string(c.s) + " E" + std::to_string(c.e) + " Ev" + std::to_string(c.ev) + (c.causal ? " causal" : "");
}

DType lse_dtype(DType dt) { return dt == kFloat64 ? kFloat64 : kFloat32; }

struct Results {
  Tensor out, lse, dq, dk, dv;
};

// Forward then backward through the kernels of `device`, every output poisoned first; dropout_p > 0
// drops with a fixed seed and offset, the same on every device.
Results run_kernels(const Case& c, double scale, const std::vector<Tensor>& in, Device device,
                    double dropout_p = 0.0) {
  const DType dt = in[0].dtype();
  backends::AttentionShape sh{c.batch, c.l, c.s, c.e, c.ev, scale, c.causal};
  sh.dropout_p = dropout_p;
  sh.seed = 321;
  sh.offset = 1000;
  Results r{poisoned_on({c.batch, c.l, c.ev}, dt, device), poisoned_on({c.batch, c.l}, lse_dtype(dt), device),
            poisoned_on({c.batch, c.l, c.e}, dt, device), poisoned_on({c.batch, c.s, c.e}, dt, device),
            poisoned_on({c.batch, c.s, c.ev}, dt, device)};
  backends::attention_forward(in[0], in[0], in[1], in[2], sh, r.out, r.lse);
  backends::attention_backward(in[0], in[0], in[1], in[2], r.out, in[3], r.lse, sh, r.dq, r.dk, r.dv);
  return r;
}

std::vector<Tensor> inputs_for(const Case& c, DType dt, uint64_t seed) {
  return {random_tensor({c.batch, c.l, c.e}, dt, seed, -1.5, 1.5),
          random_tensor({c.batch, c.s, c.e}, dt, seed + 1, -1.5, 1.5),
          random_tensor({c.batch, c.s, c.ev}, dt, seed + 2), random_tensor({c.batch, c.l, c.ev}, dt, seed + 3)};
}

std::vector<Tensor> converted(const std::vector<Tensor>& in, DType dt, Device device) {
  NoGradGuard no_grad;
  std::vector<Tensor> out;
  for (const Tensor& t : in) out.push_back(t.to(dt).to(device));
  return out;
}

// The dtype's tolerance (TESTING.md) with fp32's absolute part scaled by the longest reduction k:
// every result is a sum over up to k = max(E, Ev, L, S) terms of O(1) values, and two fp32
// summation orders of such a sum differ by up to about k ulps of the terms' scale, which an
// element near zero by cancellation keeps in absolute terms (as gemm_tolerance argues). The norm
// check keeps TESTING.md's value. For fp16/bf16 the dtype's rounding dominates (of the outputs,
// and in the tensor-core kernels of P and dS before their products, as FlashAttention does), well
// within the default; their lse is fp32.
Tolerance tolerance_of(DType dt, const Case& c) {
  const int64_t k = std::max({c.e, c.ev, c.l, c.s});
  if (dt == kFloat32) return gemm_tolerance(kFloat32, k);
  if (dt == kFloat64) {
    Tolerance t = tolerance_for(kFloat64);
    t.atol = std::max(t.atol, 1e-15 * static_cast<double>(k));
    return t;
  }
  return tolerance_for(dt);
}

void expect_matches_fp64_cpu(const Case& c, DType dt, uint64_t seed, double dropout_p = 0.0) {
  SCOPED_TRACE(name_of(c, dt) + " dropout " + std::to_string(dropout_p));
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.e));
  const std::vector<Tensor> in = inputs_for(c, dt, seed);
  const Results ref = run_kernels(c, scale, converted(in, kFloat64, Device::cpu()), Device::cpu(), dropout_p);
  const Results got = run_kernels(c, scale, converted(in, dt, gpu_device()), gpu_device(), dropout_p);
  const Tolerance tol = tolerance_of(dt, c), lse_tol = tolerance_of(lse_dtype(dt), c);
  EXPECT_EQ(got.out.dtype(), dt);
  EXPECT_TRUE(all_close(got.out, ref.out, tol)) << "out";
  EXPECT_TRUE(all_close(got.lse, ref.lse, lse_tol)) << "lse";
  EXPECT_TRUE(all_close(got.dq, ref.dq, tol)) << "grad q";
  EXPECT_TRUE(all_close(got.dk, ref.dk, tol)) << "grad k";
  EXPECT_TRUE(all_close(got.dv, ref.dv, tol)) << "grad v";
}

class CudaAttention : public CudaTest {};

TEST_F(CudaAttention, KernelsMatchTheFp64CpuKernelIntoPoisonedOutputs) {
  // Lengths around the tiles (64/32 rows for tensor cores, 32/16/8 generic): 1, 37, 130, 257, and
  // L != S both ways.
  const std::pair<int64_t, int64_t> lengths[] = {{1, 1},    {37, 37},  {130, 130}, {257, 257},
                                                 {37, 130}, {130, 37}, {1, 257},   {257, 1}};
  // Tensor cores for fp16/bf16 (multiples of 16 up to 128, E != Ev both ways, the smallest 16),
  // the generic kernels otherwise.
  const std::pair<int64_t, int64_t> heads[] = {{64, 64}, {128, 128}, {32, 128}, {128, 32},
                                               {16, 64},  {40, 40},  {24, 40}};
  uint64_t seed = 100;
  for (DType dt : float_types())
    for (const auto& [e, ev] : heads)
      for (const auto& [l, s] : lengths)
        for (bool causal : {false, true}) expect_matches_fp64_cpu({3, l, s, e, ev, causal}, dt, seed += 4);
}

// Head dims of 256 need more than the default 48 KB of shared memory for some kernels (the
// kernels opt in), fp64 the most.
TEST_F(CudaAttention, LargeHeadDimsOptInToMoreSharedMemory) {
  for (DType dt : {kFloat64, kFloat32, kBFloat16})
    for (bool causal : {false, true}) expect_matches_fp64_cpu({2, 70, 45, 256, 256, causal}, dt, 300);
}

// Dropout: the CUDA kernels draw the CPU kernel's mask (the same seed, offset and keep test), so
// they match it like the undropped ones. Head dims 64 would take the tensor cores in fp16/bf16
// without dropout; with it they go to the generic kernels. And the mask does drop: the output
// differs from p = 0's in most elements.
TEST_F(CudaAttention, DropoutMatchesTheCpuKernelAtTheSameSeed) {
  const std::pair<int64_t, int64_t> lengths[] = {{37, 130}, {130, 37}, {257, 257}, {1, 7}};
  uint64_t seed = 600;
  for (DType dt : float_types())
    for (int64_t head : {64, 40})
      for (const auto& [l, s] : lengths)
        for (bool causal : {false, true}) expect_matches_fp64_cpu({3, l, s, head, head, causal}, dt, seed += 4, 0.2);
  const Case c{2, 37, 50, 64, 64, false};
  const std::vector<Tensor> in = converted(inputs_for(c, kFloat32, 700), kFloat32, gpu_device());
  const std::vector<double> plain = to_doubles(run_kernels(c, 0.125, in, gpu_device()).out),
                            dropped = to_doubles(run_kernels(c, 0.125, in, gpu_device(), 0.5).out);
  size_t differ = 0;
  for (size_t i = 0; i < plain.size(); ++i) differ += std::abs(plain[i] - dropped[i]) > 1e-4;
  EXPECT_GT(differ, plain.size() / 2) << "of " << plain.size();
}

TEST_F(CudaAttention, ResultsAreTheSameBitsRunToRun) {
  for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
    const Case c{4, 130, 257, 64, 64, true};
    SCOPED_TRACE(name_of(c, dt));
    const std::vector<Tensor> in = converted(inputs_for(c, dt, 400), dt, gpu_device());
    const Results a = run_kernels(c, 0.125, in, gpu_device()), b = run_kernels(c, 0.125, in, gpu_device());
    EXPECT_EQ(bytes_of(a.out), bytes_of(b.out));
    EXPECT_EQ(bytes_of(a.lse), bytes_of(b.lse));
    EXPECT_EQ(bytes_of(a.dq), bytes_of(b.dq));
    EXPECT_EQ(bytes_of(a.dk), bytes_of(b.dk));
    EXPECT_EQ(bytes_of(a.dv), bytes_of(b.dv));
  }
}

// The public op on CUDA with autograd, broadcast k batch dims included: the fused path (its
// node's name tells) against the CPU's fused path in fp64, and against the composite (cuBLASLt
// GEMMs and the softmax kernels). The composite rounds the scores and the probabilities to the
// dtype, a few more roundings of 2^-8 each in bf16, so fused and composite are compared at three
// times bf16's tolerance; each path's own accuracy is the fp64 comparison's business. With
// dropout every run starts from the same seed: all three draw the same mask and take as many
// draws.
TEST_F(CudaAttention, OpFusedMatchesCompositeWithAutograd) {
  EXPECT_TRUE(backends::attention_forward.has(DeviceType::CUDA));
  for (DType dt : {kFloat32, kBFloat16}) {
    for (const auto& c : {std::pair{false, 0.0}, std::pair{true, 0.0}, std::pair{false, 0.2}, std::pair{true, 0.2}}) {
      // Not structured bindings: the lambda below captures them (C++20 for bindings; clang refuses).
      const bool causal = c.first;
      const double dropout = c.second;
      SCOPED_TRACE(std::string(dtype_name(dt)) + (causal ? " causal" : "") + " dropout " + std::to_string(dropout));
      std::vector<uint64_t> offsets;
      const std::vector<Tensor> in{random_tensor({2, 3, 37, 64}, dt, 500, -1.5, 1.5),
                                   random_tensor({2, 1, 50, 64}, dt, 501, -1.5, 1.5),
                                   random_tensor({2, 3, 50, 40}, dt, 502), random_tensor({2, 3, 37, 40}, dt, 503)};
      auto run = [&](bool fused, DType as, Device device) {
        const std::vector<Tensor> c = converted(in, as, device);
        std::vector<Tensor> x{c[0].detach().set_requires_grad(true), c[1].detach().set_requires_grad(true),
                              c[2].detach().set_requires_grad(true)};
        std::optional<CompositeOnly> composite;
        std::optional<FusedOnly> kernels;  // the measured table sends bf16 at these lengths to the composite
        if (fused) kernels.emplace();
        else composite.emplace();
        manual_seed(77);
        Tensor out = F::scaled_dot_product_attention(x[0], x[1], x[2], Tensor(), dropout, causal);
        offsets.push_back(default_generator().state().offset);
        EXPECT_EQ(std::string(out.grad_fn()->name()) == "ScaledDotProductAttentionBackward0", fused);
        out.backward(c[3]);
        x.insert(x.begin(), out);
        return x;
      };
      const std::vector<Tensor> fused = run(true, dt, gpu_device()), composite = run(false, dt, gpu_device()),
                                ref = run(true, kFloat64, Device::cpu());
      EXPECT_EQ(offsets, std::vector<uint64_t>(3, offsets[0])) << "draws taken by fused, composite, CPU";
      const Tolerance tol = tolerance_of(dt, Case{6, 37, 50, 64, 40, causal});
      Tolerance loose = tol;
      if (dt == kBFloat16) loose = {3e-2, 1.5e-1, 3e-2};
      EXPECT_EQ(fused[0].device(), gpu_device());
      EXPECT_EQ(fused[0].dtype(), dt);
      EXPECT_TRUE(all_close(fused[0], to_doubles(ref[0]), tol)) << "out against fp64";
      EXPECT_TRUE(all_close(fused[0], to_doubles(composite[0]), loose)) << "out against the composite";
      for (int g = 1; g < 4; ++g) {
        ASSERT_TRUE(fused[g].grad().defined());
        EXPECT_EQ(fused[g].grad().dtype(), dt);
        EXPECT_TRUE(all_close(fused[g].grad(), to_doubles(ref[g].grad()), tol))
            << "grad of input " << g - 1 << " against fp64";
        EXPECT_TRUE(all_close(fused[g].grad(), to_doubles(composite[g].grad()), loose))
            << "grad of input " << g - 1 << " against the composite";
      }
    }
  }
}

}  // namespace
}  // namespace mixtrain::testing
