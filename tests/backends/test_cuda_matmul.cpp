// cuBLASLt GEMMs against the CPU backend: every dtype, both operand orders, transposed views,
// batches, the bias and ReLU epilogues (and linear_relu's backward), odd sizes; the TF32 switch.
#include "backends/cuda_test_util.h"

namespace mixtrain::testing {
namespace {

class CudaGemm : public CudaTest {};

TEST_F(CudaGemm, ProductsInEveryLayoutMatchTheCpu) {
  struct Case {
    int64_t batch, m, k, n;
    bool ta, tb, bias;
  };
  const Case cases[] = {{1, 64, 128, 32, false, false, false}, {1, 33, 70, 19, true, false, true},
                        {1, 100, 1, 7, false, true, true},     {4, 17, 40, 65, true, true, false},
                        {3, 128, 256, 64, false, true, false}, {1, 1, 300, 1, false, false, true}};
  for (DType dt : float_types()) {
    for (const Case& c : cases) {
      const Shape sa = c.ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, sb = c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n};
      Shape a_shape = sa, b_shape = sb, out_shape{c.m, c.n};
      if (c.batch > 1) {
        a_shape.insert(a_shape.begin(), c.batch), b_shape.insert(b_shape.begin(), c.batch);
        out_shape.insert(out_shape.begin(), c.batch);
      }
      const Tensor a = random_tensor(a_shape, dt, 31), b = random_tensor(b_shape, dt, 32), bias = random_tensor({c.n}, dt, 33);
      compare_backends(std::string("gemm ") + dtype_name(dt) + " m=" + std::to_string(c.m) + " k=" + std::to_string(c.k),
                       {a, b, bias}, {{out_shape, dt, "out", gemm_tolerance(dt, c.k)}},
                       [c](auto& bk, const auto& in, const auto& out) {
                         backends::gemm(bk, in[0], c.ta, in[1], c.tb, out[0], c.bias ? in[2] : Tensor(), backends::GemmEpilogue::None);
                       });
    }
  }
}

TEST_F(CudaGemm, TransposedViewsAreReadInPlace) {
  // Operands whose unit stride is in the second-to-last dimension (a transpose view).
  const Tensor a = random_tensor({48, 20}, kFloat16, 34), b = random_tensor({36, 48}, kFloat16, 35);
  compare_backends("gemm on views", {a, b}, {{{20, 36}, kFloat16, "out", tolerance_for(kFloat16)}},
                   [](auto& bk, const auto& in, const auto& out) { backends::gemm(bk, in[0].t(), false, in[1].t(), false, out[0], Tensor(), backends::GemmEpilogue::None); });
}

TEST_F(CudaGemm, ReluEpilogueMatchesTheCpu) {
  // linear's layout (x [m, k] times w^T, w [n, k]), with and without bias. Where cuBLASLt has no
  // algorithm with the fused epilogue (fp64 may not), the plain product and elementwise passes run.
  struct Case {
    int64_t m, k, n;
  };
  const Case cases[] = {{64, 128, 32}, {33, 70, 19}, {512, 215, 1000}, {1, 300, 7}};
  for (DType dt : float_types()) {
    for (const Case& c : cases) {
      for (bool with_bias : {true, false}) {
        const Tensor x = random_tensor({c.m, c.k}, dt, 51), w = random_tensor({c.n, c.k}, dt, 52);
        const Tensor bias = random_tensor({c.n}, dt, 53);
        compare_backends(std::string("gemm relu ") + dtype_name(dt) + " m=" + std::to_string(c.m) +
                             (with_bias ? " bias" : ""),
                         {x, w, bias}, {{{c.m, c.n}, dt, "out", gemm_tolerance(dt, c.k)}},
                         [with_bias](auto& bk, const auto& in, const auto& out) {
                           backends::gemm(bk, in[0], false, in[1], true, out[0], with_bias ? in[2] : Tensor(),
                                   backends::GemmEpilogue::Relu);
                         });
      }
    }
  }
}

TEST_F(CudaGemm, LinearReluForwardAndBackwardMatchTheCpu) {
  for (DType dt : float_types()) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (with_bias ? " bias" : " no bias"));
      const Tensor x = random_tensor({48, 64}, dt, 54), w = random_tensor({40, 64}, dt, 55);
      const Tensor b = random_tensor({40}, dt, 56), gy = random_tensor({48, 40}, dt, 57);
      auto run = [&](Device d) {
        Tensor xd = on(x, d).set_requires_grad(true), wd = on(w, d).set_requires_grad(true);
        Tensor bd = with_bias ? on(b, d).set_requires_grad(true) : Tensor();
        Tensor y = linear_relu(xd, wd, bd);
        y.backward(on(gy, d));
        std::vector<Tensor> r{y, xd.grad(), wd.grad()};
        if (with_bias) r.push_back(bd.grad());
        return r;
      };
      const std::vector<Tensor> cpu = run(Device::cpu()), gpu = run(gpu_device());
      // grad_x sums over 40 outputs, grad_w and grad_b over 48 rows: within the k = 64 product's tolerance.
      const char* names[] = {"y", "grad x", "grad w", "grad b"};
      for (size_t i = 0; i < cpu.size(); ++i)
        EXPECT_TRUE(all_close(gpu[i], to_doubles(cpu[i]), gemm_tolerance(dt, 64))) << names[i];
    }
  }
}

TEST_F(CudaGemm, Tf32IsOptInAndWithinItsTolerance) {
  const Tensor a = random_tensor({256, 512}, kFloat32, 36).to(gpu_device());
  const Tensor b = random_tensor({512, 128}, kFloat32, 37).to(gpu_device());
  const std::vector<double> ref = to_doubles(matmul(a.to(kFloat64), b.to(kFloat64)));
  ASSERT_FALSE(cuda::allow_tf32());
  EXPECT_TRUE(all_close(matmul(a, b), ref, gemm_tolerance(kFloat32, 512))) << "strict fp32";
  cuda::set_allow_tf32(true);
  const Tensor t = matmul(a, b);
  cuda::set_allow_tf32(false);
  // TF32 keeps 10 mantissa bits: the norm error is TESTING.md's tf32 5e-4; elements get an
  // absolute tolerance in proportion to k, as for fp32 above.
  EXPECT_TRUE(all_close(t, ref, {5e-4, 5e-3, 4e-5 * 512})) << "tf32";
}

}  // namespace
}  // namespace mixtrain::testing
