// Custom ops under autocast: custom_fwd's input casts and autocast state inside, gradients to
// the original inputs, and custom_function's backward running under the forward's state.
#include "amp_test_util.h"

namespace mixtrain::amp_test {
namespace {

using amp::AutocastGuard;
using amp::CastInputs;
constexpr DeviceType kCpu = DeviceType::CPU;

using CustomOpTest = AmpTest;

TEST_F(CustomOpTest, CustomFwdCastsInputsAndSetsTheStateInside) {
  struct Seen {
    DType x, y, product;
    bool autocast;
  };
  Seen seen{};
  auto body = [&](const Tensor& x, const Tensor& w, double scale) {
    const Tensor y = matmul(x, w);
    seen = {x.dtype(), w.dtype(), y.dtype(), amp::is_autocast_enabled(kCpu)};
    return y * scale;
  };
  const Tensor x = randn({4, 3}).to(kFloat16), w = randn({3, 2}).requires_grad_();
  auto in_fp32 = amp::custom_fwd(body, CastInputs::Float32);
  auto in_half = amp::custom_fwd(body, CastInputs::LowerPrecision);
  auto keep = amp::custom_fwd(body, CastInputs::Keep);
  {
    AutocastGuard guard(kCpu, kBFloat16);
    Tensor out = in_fp32(x, w, 2.0);
    EXPECT_EQ(seen.x, kFloat32);
    EXPECT_EQ(seen.y, kFloat32);
    EXPECT_EQ(seen.product, kFloat32) << "autocast is off inside: matmul runs in fp32";
    EXPECT_FALSE(seen.autocast);
    EXPECT_TRUE(amp::is_autocast_enabled(kCpu)) << "and back on after the call";
    EXPECT_EQ(out.dtype(), kFloat32);

    out = in_half(x, w, 2.0);
    EXPECT_EQ(seen.x, kBFloat16);
    EXPECT_EQ(seen.y, kBFloat16);
    EXPECT_EQ(seen.product, kBFloat16);
    EXPECT_FALSE(seen.autocast);

    out = keep(x, w, 2.0);
    EXPECT_EQ(seen.x, kFloat16);  // untouched
    EXPECT_EQ(seen.product, kBFloat16) << "autocast still casts the ops inside";
    EXPECT_TRUE(seen.autocast);
    out.sum().backward();
  }
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), kFloat32) << "gradients reach the fp32 input through the casts";
  // Outside autocast nothing is cast.
  (void)in_half(x, w.to(kFloat16), 1.0);
  EXPECT_EQ(seen.x, kFloat16);
  EXPECT_EQ(seen.product, kFloat16);
  EXPECT_TRUE(seen.autocast == false);
}

TEST_F(CustomOpTest, CustomFwdGradientsMatchTheUncastComposite) {
  const Tensor x0 = testing::random_tensor({5, 4}, kFloat32, 1);
  auto norm = [](const Tensor& x) { return x / x.pow(2.0).sum(-1, true).sqrt(); };
  Tensor a = x0.detach().clone().requires_grad_(), b = x0.detach().clone().requires_grad_();
  auto safe = amp::custom_fwd(norm, CastInputs::Float32);
  Tensor out;
  {
    AutocastGuard guard(kCpu, kFloat16);
    out = safe(a.to(kFloat16));  // a half input is computed in fp32 all the same
  }
  EXPECT_EQ(out.dtype(), kFloat32);
  (out * out.detach()).sum().backward();
  const Tensor ref = norm(b.to(kFloat16).to(kFloat32));
  (ref * ref.detach()).sum().backward();
  EXPECT_EQ(values_of(out), values_of(ref));
  EXPECT_EQ(values_of(a.grad()), values_of(b.grad()));
}

// y = x @ w with a hand-written backward that records the autocast state and dtypes it ran in.
struct BackwardSeen {
  bool autocast = false;
  DType grad_dtype = kFloat64, product_dtype = kFloat64;
};

std::vector<Tensor> custom_matmul(const Tensor& x, const Tensor& w, CastInputs cast, BackwardSeen* seen) {
  return amp::custom_function("CustomMatmul", {x, w}, cast, [seen](const std::vector<Tensor>& in) {
    amp::CustomForwardResult r;
    r.outputs = {matmul(in[0], in[1])};
    const Tensor xs = in[0], ws = in[1];
    r.backward = [xs, ws, seen](const autograd::TensorList& g) {
      seen->autocast = amp::is_autocast_enabled(kCpu);
      seen->grad_dtype = g[0].dtype();
      const Tensor gx = matmul(g[0], ws.t());
      seen->product_dtype = gx.dtype();
      return autograd::TensorList{gx.to(xs.dtype()), matmul(xs.t(), g[0]).to(ws.dtype())};
    };
    return r;
  });
}

TEST_F(CustomOpTest, CustomFunctionBackwardRunsUnderTheForwardState) {
  const Tensor x0 = testing::random_tensor({4, 3}, kFloat32, 2), w0 = testing::random_tensor({3, 5}, kFloat32, 3);
  for (CastInputs cast : {CastInputs::Float32, CastInputs::LowerPrecision, CastInputs::Keep}) {
    SCOPED_TRACE(static_cast<int>(cast));
    Tensor x = x0.detach().clone().requires_grad_(), w = w0.detach().clone().requires_grad_();
    BackwardSeen seen;
    Tensor y;
    {
      AutocastGuard guard(kCpu, kFloat16);
      y = custom_matmul(x, w, cast, &seen)[0];
    }
    // backward() outside the scope, as in a real loop.
    y.to(kFloat32).sum().backward();
    const DType expect_in = cast == CastInputs::LowerPrecision ? kFloat16 : kFloat32;
    EXPECT_EQ(y.dtype(), cast == CastInputs::Keep ? kFloat16 : expect_in);
    EXPECT_EQ(seen.autocast, cast == CastInputs::Keep);
    EXPECT_EQ(seen.grad_dtype, y.dtype());
    // Keep: the backward's matmul is autocast to fp16 as in the forward; else it runs as given.
    EXPECT_EQ(seen.product_dtype, cast == CastInputs::Keep ? kFloat16 : expect_in);
    ASSERT_TRUE(x.grad().defined() && w.grad().defined());
    EXPECT_EQ(x.grad().dtype(), kFloat32);
    // d/dx sum(x w) = 1 w^T: each row of x.grad is w's row sums.
    const std::vector<float> wv = values_of(w0), gx = values_of(x.grad());
    const double tol = cast == CastInputs::Float32 ? 1e-5 : 1e-2;
    for (int i = 0; i < 4; ++i)
      for (int k = 0; k < 3; ++k) {
        double want = 0;
        for (int j = 0; j < 5; ++j) want += wv[static_cast<size_t>(k * 5 + j)];
        EXPECT_NEAR(gx[static_cast<size_t>(i * 3 + k)], want, tol * (1 + std::abs(want)));
      }
  }
  EXPECT_FALSE(amp::is_autocast_enabled(kCpu));
}

TEST_F(CustomOpTest, CustomFunctionErrors) {
  const Tensor x = randn({2, 2}).requires_grad_();
  expect_error([&] { amp::custom_function("NoBackward", {x}, CastInputs::Keep, [](const std::vector<Tensor>& in) {
                       return amp::CustomForwardResult{{in[0] * 2.0}, nullptr};
                     }); },
               "NoBackward: inputs require grad but the forward returned no backward function");
  auto out = amp::custom_function("WrongCount", {x}, CastInputs::Keep, [](const std::vector<Tensor>& in) {
    return amp::CustomForwardResult{{in[0] * 2.0}, [](const autograd::TensorList& g) { return autograd::TensorList{g[0], g[0]}; }};
  });
  expect_error([&] { out[0].sum().backward(); }, "WrongCount: the backward returned 2 gradients for 1 inputs");
}

}  // namespace
}  // namespace mixtrain::amp_test
