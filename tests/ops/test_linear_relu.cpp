// linear_relu (linear with the ReLU in the GEMM's epilogue): against an fp64 reference written
// here, against relu(linear(...)) bit for bit, the CPU kernel's epilogue into poisoned outputs,
// and its errors.
#include <string>

#include "backends/matmul.h"
#include "ops/op_reference.h"

namespace mt = mixtrain;
using mt::Tensor;
using mt::backends::GemmEpilogue;
using namespace mixtrain::testing;

namespace {

// x w^T + b (then the ReLU when relu) with plain loops: x [rows, in], w [out, in], b [out] or empty.
Values linear_ref(const Values& x, const Values& w, const Values& b, int64_t in, int64_t out, bool relu) {
  const int64_t rows = static_cast<int64_t>(x.size()) / in;
  Values y(rows * out);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = b.empty() ? 0.0 : b[o];
      for (int64_t k = 0; k < in; ++k) s += x[r * in + k] * w[o * in + k];
      y[r * out + o] = relu && s <= 0 ? 0.0 : s;
    }
  return y;
}

std::string case_name(mt::DType dt, bool bias) { return std::string(mt::dtype_name(dt)) + (bias ? " bias" : " no bias"); }

}  // namespace

TEST(LinearRelu, ForwardAndGradientsMatchReferenceInEveryDtype) {
  constexpr int64_t kIn = 7, kOut = 5;
  for (mt::DType dt : float_types()) {
    for (bool with_bias : {true, false}) {
      const Tensor x = random_tensor({2, 3, kIn}, dt, 11), w = random_tensor({kOut, kIn}, dt, 12);
      const Tensor b = with_bias ? random_tensor({kOut}, dt, 13) : Tensor();
      check_op(
          case_name(dt, with_bias), [](const std::vector<Tensor>& in) { return mt::linear_relu(in[0], in[1], in[2]); },
          [](const std::vector<Values>& v) { return linear_ref(v[0], v[1], v[2], kIn, kOut, true); }, {x, w, b},
          with_bias ? std::vector<size_t>{0, 1, 2} : std::vector<size_t>{0, 1}, tolerance_for(dt));
    }
  }
}

TEST(LinearRelu, GradcheckInFp64WithAViewAndWithoutBias) {
  auto fused = [](const std::vector<Tensor>& in) { return mt::linear_relu(in[0], in[1], in[2]); };
  EXPECT_TRUE(gradcheck(fused, {random_tensor({2, 3, 5}, mt::kFloat64, 1), random_tensor({4, 5}, mt::kFloat64, 2),
                                random_tensor({4}, mt::kFloat64, 3)}));
  // The weight as a transposed view: its unit stride is in the first dimension.
  auto no_bias_view = [](const std::vector<Tensor>& in) { return mt::linear_relu(in[0], in[1].t()); };
  EXPECT_TRUE(gradcheck(no_bias_view, {random_tensor({6, 5}, mt::kFloat64, 4), random_tensor({5, 4}, mt::kFloat64, 5)}));
}

TEST(LinearRelu, MatchesReluOfLinearBitForBit) {
  for (mt::DType dt : float_types()) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(case_name(dt, with_bias));
      Tensor x0 = random_tensor({9, 16}, dt, 21);
      x0.select(0, 4).fill_(0.0);  // a row whose pre-activation is exactly the bias (or 0)
      const Tensor w0 = random_tensor({12, 16}, dt, 22), b0 = with_bias ? random_tensor({12}, dt, 23) : Tensor();
      const Tensor gy = random_tensor({9, 12}, dt, 24);
      auto run = [&](bool fused) {
        Tensor x = x0.detach().set_requires_grad(true), w = w0.detach().set_requires_grad(true);
        Tensor b = with_bias ? b0.detach().set_requires_grad(true) : Tensor();
        Tensor y = fused ? mt::linear_relu(x, w, b) : mt::relu(mt::linear(x, w, b));
        y.backward(gy);
        std::vector<Values> r{to_doubles(y), to_doubles(x.grad()), to_doubles(w.grad())};
        if (with_bias) r.push_back(to_doubles(b.grad()));
        return r;
      };
      const std::vector<Values> fused = run(true), unfused = run(false);
      const char* names[] = {"output", "grad x", "grad weight", "grad bias"};
      for (size_t i = 0; i < fused.size(); ++i) EXPECT_EQ(fused[i], unfused[i]) << names[i];
      // The ReLU really clamped something, or this comparison says little.
      size_t zeros = 0;
      for (double v : fused[0]) zeros += v == 0.0;
      EXPECT_GT(zeros, fused[0].size() / 4);
    }
  }
}

TEST(LinearRelu, CpuEpilogueWritesEveryElement) {
  // The kernel directly, into NaN-filled outputs: bias and ReLU, bias alone, ReLU alone, and a
  // batched product (the epilogue runs over all batches' rows).
  for (mt::DType dt : float_types()) {
    for (bool with_bias : {true, false}) {
      for (GemmEpilogue epi : {GemmEpilogue::None, GemmEpilogue::Relu}) {
        SCOPED_TRACE(case_name(dt, with_bias) + (epi == GemmEpilogue::Relu ? " relu" : " none"));
        const Tensor x = random_tensor({33, 40}, dt, 31), w = random_tensor({19, 40}, dt, 32);
        const Tensor b = with_bias ? random_tensor({19}, dt, 33) : Tensor();
        Tensor out = poisoned({33, 19}, dt);
        mt::backends::gemm(mt::DeviceType::CPU, x, false, w, true, out, b, epi);
        ASSERT_TRUE(all_finite(out));
        const Values ref = linear_ref(to_doubles(x), to_doubles(w), b.defined() ? to_doubles(b) : Values{}, 40, 19,
                                      epi == GemmEpilogue::Relu);
        EXPECT_TRUE(all_close(out, ref, tolerance_for(dt)));
      }
    }
    const Tensor a = random_tensor({3, 6, 8}, dt, 34), bt = random_tensor({3, 5, 8}, dt, 35);
    Tensor out = poisoned({3, 6, 5}, dt);
    mt::backends::gemm(mt::DeviceType::CPU, a, false, bt, true, out, Tensor(), GemmEpilogue::Relu);
    const Values av = to_doubles(a), bv = to_doubles(bt);
    Values ref;
    for (int64_t i = 0; i < 3; ++i) {
      const Values ai(av.begin() + i * 48, av.begin() + (i + 1) * 48), bi(bv.begin() + i * 40, bv.begin() + (i + 1) * 40);
      const Values ri = linear_ref(ai, bi, {}, 8, 5, true);
      ref.insert(ref.end(), ri.begin(), ri.end());
    }
    EXPECT_TRUE(all_close(out, ref, tolerance_for(dt))) << "batched, " << mt::dtype_name(dt);
  }
}

TEST(LinearRelu, BadArgumentsNameTheOpAndShapes) {
  const std::string shape_error = error_of([] { mt::linear_relu(mt::randn({2, 3}), mt::randn({4, 5})); });
  EXPECT_NE(shape_error.find("linear_relu: input [2, 3] float32 cpu does not match weight [4, 5]"), std::string::npos)
      << shape_error;
  const std::string bias_error = error_of([] { mt::linear_relu(mt::randn({2, 5}), mt::randn({4, 5}), mt::randn({3})); });
  EXPECT_NE(bias_error.find("linear_relu: bias [3] float32 cpu does not match weight [4, 5]"), std::string::npos)
      << bias_error;
  const std::string dtype_error =
      error_of([] { mt::linear_relu(mt::randn({2, 5}), mt::randn({4, 5}).to(mt::kFloat16)); });
  EXPECT_NE(dtype_error.find("linear_relu: expected both inputs to have the same dtype"), std::string::npos)
      << dtype_error;
}
