// conv2d and conv_transpose2d against direct fp64 loops (the gather form of a convolution and
// the scatter form of a transposed one, so neither reference is the other's code), for every
// dtype, with strides, padding, dilation, groups and bias; gradients against the reference's
// numerical derivative and against finite differences in fp64; kernels into poisoned outputs;
// argument errors.
#include "backends/all_kernels.h"
#include "ops/op_reference.h"

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;
using namespace mixtrain::testing;

namespace {

struct ConvCase {
  int64_t n, c, h, w, co, kh, kw;
  mt::nn::IntPair stride, padding, dilation;
  int64_t groups;
  bool bias;
  mt::nn::IntPair output_padding = 0;  // transposed only
};

int64_t conv_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

// out[n, o, i, j] = b[o] + sum over the group's channels and taps of x * w.
Values conv_ref(const ConvCase& k, const std::vector<Values>& in) {
  const Values &x = in[0], &w = in[1];
  const int64_t ho = conv_out(k.h, k.kh, k.stride.h, k.padding.h, k.dilation.h);
  const int64_t wo = conv_out(k.w, k.kw, k.stride.w, k.padding.w, k.dilation.w);
  const int64_t cg = k.c / k.groups, cog = k.co / k.groups;
  Values out(k.n * k.co * ho * wo);
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t o = 0; o < k.co; ++o)
      for (int64_t i = 0; i < ho; ++i)
        for (int64_t j = 0; j < wo; ++j) {
          double s = k.bias ? in[2][o] : 0.0;
          const int64_t g = o / cog;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t a = 0; a < k.kh; ++a)
              for (int64_t b = 0; b < k.kw; ++b) {
                const int64_t y = i * k.stride.h - k.padding.h + a * k.dilation.h;
                const int64_t z = j * k.stride.w - k.padding.w + b * k.dilation.w;
                if (y < 0 || y >= k.h || z < 0 || z >= k.w) continue;
                s += x[((n * k.c + g * cg + ci) * k.h + y) * k.w + z] * w[((o * cg + ci) * k.kh + a) * k.kw + b];
              }
          out[((n * k.co + o) * ho + i) * wo + j] = s;
        }
  return out;
}

// Transposed: every input pixel scatters x * w into the output window it maps to.
// weight [c, co / groups, kh, kw].
Values conv_transpose_ref(const ConvCase& k, const std::vector<Values>& in) {
  const Values &x = in[0], &w = in[1];
  const int64_t ho = (k.h - 1) * k.stride.h - 2 * k.padding.h + k.dilation.h * (k.kh - 1) + k.output_padding.h + 1;
  const int64_t wo = (k.w - 1) * k.stride.w - 2 * k.padding.w + k.dilation.w * (k.kw - 1) + k.output_padding.w + 1;
  const int64_t cg = k.c / k.groups, cog = k.co / k.groups;
  Values out(k.n * k.co * ho * wo, 0.0);
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t o = 0; o < k.co; ++o)
      for (int64_t i = 0; i < ho; ++i)
        for (int64_t j = 0; j < wo; ++j) out[((n * k.co + o) * ho + i) * wo + j] = k.bias ? in[2][o] : 0.0;
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t ci = 0; ci < k.c; ++ci)
      for (int64_t y = 0; y < k.h; ++y)
        for (int64_t z = 0; z < k.w; ++z)
          for (int64_t ol = 0; ol < cog; ++ol)
            for (int64_t a = 0; a < k.kh; ++a)
              for (int64_t b = 0; b < k.kw; ++b) {
                const int64_t i = y * k.stride.h - k.padding.h + a * k.dilation.h;
                const int64_t j = z * k.stride.w - k.padding.w + b * k.dilation.w;
                if (i < 0 || i >= ho || j < 0 || j >= wo) continue;
                const int64_t o = (ci / cg) * cog + ol;
                out[((n * k.co + o) * ho + i) * wo + j] +=
                    x[((n * k.c + ci) * k.h + y) * k.w + z] * w[((ci * cog + ol) * k.kh + a) * k.kw + b];
              }
  return out;
}

const ConvCase kConvCases[] = {
    {2, 4, 7, 6, 6, 3, 3, {2, 1}, {1, 2}, {1, 2}, 2, true},  // everything at once
    {3, 5, 4, 5, 3, 1, 1, 1, 0, 1, 1, false},                // 1x1, no bias
    {1, 4, 6, 6, 4, 3, 2, 2, 1, 1, 4, true},                 // depthwise, stride 2
    // Padding wider than the dilated kernel reaches: kernel columns with no tap inside the image.
    {2, 2, 3, 2, 3, 2, 3, 1, {1, 4}, {1, 4}, 1, true},
    {1, 2, 5, 3, 2, 2, 3, {1, 3}, {0, 3}, {1, 2}, 1, true},  // stride 3 with dilation 2 and padding
};

std::vector<mt::Tensor> conv_inputs(const ConvCase& k, mt::DType dt, bool transposed, uint64_t seed) {
  const mt::Shape ws = transposed ? mt::Shape{k.c, k.co / k.groups, k.kh, k.kw} : mt::Shape{k.co, k.c / k.groups, k.kh, k.kw};
  return {random_tensor({k.n, k.c, k.h, k.w}, dt, seed), random_tensor(ws, dt, seed + 1),
          k.bias ? random_tensor({k.co}, dt, seed + 2) : mt::Tensor()};
}

}  // namespace

TEST(Conv2d, ForwardAndBackwardMatchReferenceForEveryDtype) {
  int index = 0;
  for (const ConvCase& k : kConvCases) {
    for (mt::DType dt : float_types()) {
      auto op = [&](const std::vector<mt::Tensor>& in) {
        return F::conv2d(in[0], in[1], in[2], k.stride, k.padding, k.dilation, k.groups);
      };
      auto ref = [&](const std::vector<Values>& in) { return conv_ref(k, in); };
      std::vector<size_t> wrt{0, 1};
      if (k.bias) wrt.push_back(2);
      check_op("conv case " + std::to_string(index) + " " + mt::dtype_name(dt), op, ref, conv_inputs(k, dt, false, 10),
               wrt, tolerance_for(dt));
    }
    ++index;
  }
}

TEST(Conv2d, GradcheckIncludingNonContiguousInput) {
  const ConvCase& k = kConvCases[0];
  // x is a transposed view: the op must read it through its strides.
  mt::Tensor x = random_tensor({k.n, k.c, k.w, k.h}, mt::kFloat64, 1).transpose(2, 3);
  ASSERT_FALSE(x.is_contiguous());
  EXPECT_TRUE(gradcheck(
      [&](const std::vector<mt::Tensor>& in) {
        return F::conv2d(in[0], in[1], in[2], k.stride, k.padding, k.dilation, k.groups);
      },
      {x, random_tensor({k.co, k.c / k.groups, k.kh, k.kw}, mt::kFloat64, 2), random_tensor({k.co}, mt::kFloat64, 3)}));
}

TEST(ConvTranspose2d, ForwardAndBackwardMatchReferenceForEveryDtype) {
  const ConvCase cases[] = {
      {2, 4, 4, 5, 6, 3, 2, {2, 3}, {1, 0}, 1, 2, true, {1, 2}},  // groups, output_padding < stride
      {1, 3, 3, 4, 2, 2, 3, 1, {0, 1}, 2, 1, false, {1, 0}},      // output_padding < dilation
  };
  int index = 0;
  for (const ConvCase& k : cases) {
    for (mt::DType dt : float_types()) {
      auto op = [&](const std::vector<mt::Tensor>& in) {
        return F::conv_transpose2d(in[0], in[1], in[2], k.stride, k.padding, k.output_padding, k.groups, k.dilation);
      };
      auto ref = [&](const std::vector<Values>& in) { return conv_transpose_ref(k, in); };
      std::vector<size_t> wrt{0, 1};
      if (k.bias) wrt.push_back(2);
      check_op("transposed case " + std::to_string(index) + " " + mt::dtype_name(dt), op, ref,
               conv_inputs(k, dt, true, 20), wrt, tolerance_for(dt));
    }
    ++index;
  }
  const ConvCase& k = cases[0];
  mt::Tensor x = random_tensor({k.n, k.c, k.w, k.h}, mt::kFloat64, 4).transpose(2, 3);
  EXPECT_TRUE(gradcheck(
      [&](const std::vector<mt::Tensor>& in) {
        return F::conv_transpose2d(in[0], in[1], in[2], k.stride, k.padding, k.output_padding, k.groups, k.dilation);
      },
      {x, random_tensor({k.c, k.co / k.groups, k.kh, k.kw}, mt::kFloat64, 5), random_tensor({k.co}, mt::kFloat64, 6)}));
}

TEST(Conv2d, KernelsWriteEveryOutputElement) {
  const ConvCase& k = kConvCases[0];
  mt::backends::Conv2dParams p;
  p.stride_h = k.stride.h, p.stride_w = k.stride.w, p.pad_h = k.padding.h, p.pad_w = k.padding.w;
  p.dilation_h = k.dilation.h, p.dilation_w = k.dilation.w, p.groups = k.groups;
  const mt::DeviceType cpu = mt::DeviceType::CPU;
  for (mt::DType dt : float_types()) {
    const auto in = conv_inputs(k, dt, false, 30);
    const int64_t ho = conv_out(k.h, k.kh, k.stride.h, k.padding.h, k.dilation.h);
    const int64_t wo = conv_out(k.w, k.kw, k.stride.w, k.padding.w, k.dilation.w);
    mt::Tensor out = poisoned({k.n, k.co, ho, wo}, dt);
    mt::backends::conv2d(cpu, in[0], in[1], in[2], p, out);
    EXPECT_TRUE(all_finite(out)) << dt;
    mt::Tensor gx = poisoned(in[0].shape(), dt), gw = poisoned(in[1].shape(), dt);
    mt::backends::conv2d_backward_input(cpu, out, in[1], p, gx);
    mt::backends::conv2d_backward_weight(cpu, out, in[0], p, gw);
    EXPECT_TRUE(all_finite(gx)) << dt;
    EXPECT_TRUE(all_finite(gw)) << dt;
  }
}

TEST(Conv2d, HalfComputesInFp32AndRoundsOnce) {
  // 1 + 255 products of 2^-12: each is under half an fp16 ulp at 1 (2^-11), so an fp16 running
  // sum stays at 1. Summed in fp32 it is 1 + 255 / 4096 = 1.062255859375, which rounds once to
  // the nearest fp16, 1 + 64 / 1024 = 1.0625.
  mt::Tensor x = mt::ones({1, 256, 1, 1}, mt::kFloat16);
  std::vector<float> wv(256, 1.0f / 4096);
  wv[0] = 1.0f;
  mt::Tensor w = mt::from_vector(wv, {1, 256, 1, 1}).to(mt::kFloat16);
  EXPECT_EQ(F::conv2d(x, w).item<float>(), 1.0625f);
}

TEST(Conv2d, BadArgumentsRaiseErrorsNamingTheOp) {
  const mt::Tensor x = mt::randn({2, 4, 5, 5}), w = mt::randn({6, 4, 3, 3});
  expect_error([&] { F::conv2d(x, mt::randn({6, 3, 3, 3})); }, "conv2d: input [2, 4, 5, 5] float32 cpu has 4 channels");
  expect_error([&] { F::conv2d(x, mt::randn({6, 4, 3})); }, "conv2d: expected weight");
  expect_error([&] { F::conv2d(mt::randn({4, 5, 5}), w); }, "conv2d: expected input [N, C, H, W]");
  expect_error([&] { F::conv2d(x, w.to(mt::kFloat16)); }, "must have the same dtype");
  expect_error([&] { F::conv2d(x, mt::randn({6, 2, 3, 3}), {}, 1, 0, 1, 3); }, "conv2d: input");
  expect_error([&] { F::conv2d(x, mt::randn({5, 2, 3, 3}), {}, 1, 0, 1, 2); }, "not divisible by groups=2");
  expect_error([&] { F::conv2d(x, w, {}, 0); }, "conv2d: stride must be positive");
  expect_error([&] { F::conv2d(x, w, {}, 1, -1); }, "conv2d: padding must be non-negative");
  expect_error([&] { F::conv2d(x, mt::randn({6, 4, 7, 7})); }, "is smaller than the dilated kernel");
  expect_error([&] { F::conv2d(x, w, mt::randn({5})); }, "conv2d: bias [5] float32 cpu does not match the 6 output");
  expect_error([&] { F::conv_transpose2d(x, mt::randn({3, 2, 3, 3})); }, "conv_transpose2d: input [2, 4, 5, 5]");
  expect_error([&] { F::conv_transpose2d(x, mt::randn({4, 2, 3, 3}), {}, 2, 0, 2); },
               "output_padding (2, 2) must be smaller than either stride or dilation");
}
