// cuBLASLt GEMMs against the CPU backend: every dtype, both operand orders, transposed views,
// batches, the bias and ReLU epilogues (and linear_relu's backward), odd sizes; the TF32 switch;
// the algorithm choice's table file and switch.
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>

#include "backends/cuda_test_util.h"
#include "backends/gemm_tuning_file.h"

#ifdef MIXTRAIN_WITH_CUDA
namespace mixtrain::backends::cuda {
void reset_gemm_tuning();  // backends/cuda/gemm_tuning.h, declared here to keep cuBLASLt's headers out
}  // namespace mixtrain::backends::cuda
#endif

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

#ifdef MIXTRAIN_WITH_CUDA  // the tuning switches exist in CUDA builds only
// A GEMM of a shape no other test uses builds its plan, and so chooses its algorithm, now.
void check_fresh_gemm(int64_t m, int64_t k, int64_t n) {
  const Tensor a = random_tensor({m, k}, kFloat16, 38), b = random_tensor({k, n}, kFloat16, 39);
  const std::vector<double> ref = to_doubles(matmul(a.to(kFloat64), b.to(kFloat64)));
  EXPECT_TRUE(all_close(matmul(a.to(gpu_device()), b.to(gpu_device())), ref, gemm_tolerance(kFloat16, k)))
      << m << "x" << k << "x" << n;
}

TEST_F(CudaGemm, TimedChoicesAreSavedToTheTuningFileAndTheSwitchTurnsTimingOff) {
  const std::string file = (std::filesystem::temp_directory_path() /
                            ("mt_gemm_tuning_" + std::to_string(::getpid()) + ".json")).string();
  std::filesystem::remove(file);
  ::setenv("MIXTRAIN_GEMM_TUNING_FILE", file.c_str(), 1);
  ::setenv("MIXTRAIN_GEMM_TUNING", "1", 1);  // whatever the caller's environment says
  backends::cuda::reset_gemm_tuning();
  check_fresh_gemm(1000, 1536, 1000);  // timed over the candidates: the result is still right
  const backends::GemmTuningTable t = backends::read_gemm_tuning(file);
  EXPECT_EQ(t.device, cuda::device_name(0));
  bool saved = false;
  for (const auto& [key, index] : t.choices) saved = saved || key.find(",1000,1000,1536,") != std::string::npos;
  EXPECT_TRUE(saved) << "no choice for the 1000x1536x1000 GEMM in " << file;

  // Off: the heuristic's first, untimed, and nothing new is saved.
  std::filesystem::remove(file);
  ::setenv("MIXTRAIN_GEMM_TUNING", "0", 1);
  backends::cuda::reset_gemm_tuning();
  check_fresh_gemm(1000, 1544, 1000);
  EXPECT_FALSE(std::filesystem::exists(file));

  // A bad switch value is an error naming it, at the next new GEMM.
  ::setenv("MIXTRAIN_GEMM_TUNING", "yes", 1);
  backends::cuda::reset_gemm_tuning();
  const Tensor a = random_tensor({1000, 1552}, kFloat16, 40).to(gpu_device());
  const Tensor b = random_tensor({1552, 1000}, kFloat16, 41).to(gpu_device());
  try {
    matmul(a, b);
    ADD_FAILURE() << "MIXTRAIN_GEMM_TUNING=yes was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MIXTRAIN_GEMM_TUNING"), std::string::npos) << e.what();
  }
  ::unsetenv("MIXTRAIN_GEMM_TUNING");
  ::unsetenv("MIXTRAIN_GEMM_TUNING_FILE");
  backends::cuda::reset_gemm_tuning();
  std::filesystem::remove(file);
}
#endif

}  // namespace
}  // namespace mixtrain::testing
