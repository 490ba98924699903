// cuBLASLt GEMMs and cuDNN convolutions against the CPU backend: every dtype, both operand
// orders, transposed views, batches, the bias and ReLU epilogues (and linear_relu's backward),
// odd sizes; the TF32 switch; conv2d with stride, padding, dilation and groups in all three
// directions.
#include "backends/cuda_test_util.h"

namespace mixtrain::testing {
namespace {

// Two summation orders of a k-term fp32 dot product of values in [-1, 1] differ by up to about
// k ulps of the terms' scale, not of the result: a result near zero by cancellation keeps that
// absolute error. So fp32 gets an absolute tolerance of 3e-7 * k (below the classical bound
// k * eps * sum |a_i b_i|), and the norm check stays at TESTING.md's 1e-5.
Tolerance gemm_tolerance(DType dt, int64_t k) {
  Tolerance t = tolerance_for(dt);
  if (dt == kFloat32) t.atol = 3e-7 * static_cast<double>(k);
  return t;
}

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

class CudaConv : public CudaTest {};

TEST_F(CudaConv, ForwardAndBothBackwardsMatchTheCpu) {
  struct Case {
    int64_t n, c, h, w, cout, kh, kw;
    backends::Conv2dParams p;
  };
  backends::Conv2dParams plain, strided, dilated, grouped;
  strided.stride_h = strided.stride_w = 2, strided.pad_h = 1, strided.pad_w = 2;
  dilated.dilation_h = 2, dilated.dilation_w = 3, dilated.pad_h = dilated.pad_w = 2;
  grouped.groups = 4, grouped.pad_h = grouped.pad_w = 1;
  const Case cases[] = {{2, 3, 16, 16, 8, 3, 3, plain}, {2, 8, 15, 17, 16, 3, 3, strided},
                        {1, 4, 20, 21, 6, 3, 2, dilated}, {3, 8, 9, 9, 12, 3, 3, grouped}, {8, 16, 8, 8, 32, 1, 1, plain}};
  for (DType dt : float_types()) {
    if (dt == kFloat32) cuda::set_cudnn_allow_tf32(false);  // compare strict fp32 with the CPU
    for (const Case& c : cases) {
      const auto& p = c.p;
      const int64_t ho = (c.h + 2 * p.pad_h - p.dilation_h * (c.kh - 1) - 1) / p.stride_h + 1;
      const int64_t wo = (c.w + 2 * p.pad_w - p.dilation_w * (c.kw - 1) - 1) / p.stride_w + 1;
      const Tensor x = random_tensor({c.n, c.c, c.h, c.w}, dt, 41), w = random_tensor({c.cout, c.c / p.groups, c.kh, c.kw}, dt, 42);
      const Tensor bias = random_tensor({c.cout}, dt, 43), gy = random_tensor({c.n, c.cout, ho, wo}, dt, 44);
      Tolerance tol = gemm_tolerance(dt, c.c / p.groups * c.kh * c.kw);  // a convolution is a GEMM over C*kh*kw
      compare_backends(std::string("conv2d ") + dtype_name(dt) + " groups=" + std::to_string(p.groups), {x, w, bias, gy},
                       {{gy.shape(), dt, "y", tol}, {x.shape(), dt, "grad_x", tol}, {w.shape(), dt, "grad_w", tol}},
                       [p](auto& bk, const auto& in, const auto& out) {
                         backends::conv2d(bk, in[0], in[1], in[2], p, out[0]);
                         backends::conv2d_backward_input(bk, in[3], in[1], p, out[1]);
                         backends::conv2d_backward_weight(bk, in[3], in[0], p, out[2]);
                       });
    }
    cuda::set_cudnn_allow_tf32(true);
  }
}

TEST_F(CudaConv, BenchmarkModeGivesTheSameResults) {
  const Tensor x = random_tensor({4, 16, 32, 32}, kFloat16, 45).to(gpu_device());
  const Tensor w = random_tensor({32, 16, 3, 3}, kFloat16, 46).to(gpu_device());
  const Tensor y = nn::functional::conv2d(x, w, Tensor(), 1, 1);
  cuda::set_cudnn_benchmark(true);
  const Tensor yb = nn::functional::conv2d(x, w, Tensor(), 1, 1);
  cuda::set_cudnn_benchmark(false);
  EXPECT_TRUE(all_close(yb, to_doubles(y), tolerance_for(kFloat16)));
}

}  // namespace
}  // namespace mixtrain::testing
