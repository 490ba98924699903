// max_pool2d and interpolate (nearest, bilinear with and without align_corners, by size and by
// scale factor) against fp64 loops for every dtype; gradients against the reference's numerical
// derivative and gradcheck in fp64 (non-contiguous input); poisoned kernel outputs; errors.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "backends/all_kernels.h"
#include "ops/op_reference.h"

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;
using namespace mixtrain::testing;

namespace {

struct PoolCase {
  int64_t n, c, h, w;
  mt::nn::IntPair kernel;
  std::optional<mt::nn::IntPair> stride;  // nullopt: the kernel size, as the op's default
  mt::nn::IntPair padding, dilation;
  bool ceil_mode;
  mt::nn::IntPair s() const { return stride.value_or(kernel); }
};

int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const double span = static_cast<double>(in + 2 * p - d * (k - 1) - 1) / static_cast<double>(s);
  int64_t out = static_cast<int64_t>(ceil_mode ? std::ceil(span) : std::floor(span)) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;  // the last window must start inside
  return out;
}

// Max over each window (padding excluded), and the flat position of the first maximum.
Values pool_ref(const PoolCase& k, const Values& x, std::vector<int64_t>* argmax = nullptr) {
  const int64_t ho = pool_out(k.h, k.kernel.h, k.s().h, k.padding.h, k.dilation.h, k.ceil_mode);
  const int64_t wo = pool_out(k.w, k.kernel.w, k.s().w, k.padding.w, k.dilation.w, k.ceil_mode);
  Values out;
  for (int64_t p = 0; p < k.n * k.c; ++p)
    for (int64_t i = 0; i < ho; ++i)
      for (int64_t j = 0; j < wo; ++j) {
        double best = -std::numeric_limits<double>::infinity();
        int64_t arg = -1;
        for (int64_t a = 0; a < k.kernel.h; ++a)
          for (int64_t b = 0; b < k.kernel.w; ++b) {
            const int64_t y = i * k.s().h - k.padding.h + a * k.dilation.h;
            const int64_t z = j * k.s().w - k.padding.w + b * k.dilation.w;
            if (y < 0 || y >= k.h || z < 0 || z >= k.w) continue;
            if (x[(p * k.h + y) * k.w + z] > best) best = x[(p * k.h + y) * k.w + z], arg = y * k.w + z;
          }
        out.push_back(best);
        if (argmax) argmax->push_back(arg);
      }
  return out;
}

// Distinct values k / 64, |k| <= 256, shuffled: exact in every dtype (bf16 has 8 significant
// bits), so no window holds a tie after rounding and the numerical derivative is well defined.
mt::Tensor distinct_values(const mt::Shape& shape, mt::DType dt, uint64_t seed) {
  const int64_t n = mt::shape_numel(shape);
  std::vector<double> v(n);
  std::iota(v.begin(), v.end(), 0.0);
  mt::Generator gen(seed);
  for (int64_t i = n - 1; i > 0; --i) std::swap(v[i], v[gen.next_u64() % (i + 1)]);
  for (double& e : v) e = (e - static_cast<double>(n / 2)) / 64.0;
  return mt::from_vector(v, shape).to(dt);
}

const PoolCase kPoolCases[] = {
    {2, 3, 7, 6, 3, 2, 1, 1, false},                    // overlapping windows with padding
    {1, 2, 8, 7, {3, 2}, mt::nn::IntPair{2, 3}, {1, 0}, {2, 1}, true},  // dilation, ceil_mode, rectangular
    {2, 2, 4, 6, 2, std::nullopt, 0, 1, false},             // stride defaults to the kernel
};

// PyTorch's nearest_idx: floor(o * scale) in fp32, scale = 1 / scale_factor or in / out.
int64_t nearest_src(int64_t o, int64_t in, double scale) {
  return std::min<int64_t>(static_cast<int64_t>(std::floor(static_cast<float>(o) * static_cast<float>(scale))), in - 1);
}

struct UpCase {
  int64_t n, c, h, w;
  F::InterpolateOptions options;
};

// Output size and source scale per axis as PyTorch's interpolate defines them.
void up_geometry(const UpCase& k, int64_t* ho, int64_t* wo, double* sh, double* sw) {
  const auto& o = k.options;
  if (o.size()) {
    *ho = o.size()->h, *wo = o.size()->w;
    *sh = static_cast<double>(k.h) / *ho, *sw = static_cast<double>(k.w) / *wo;
  } else {
    *ho = static_cast<int64_t>(std::floor(k.h * o.scale_factor()->first));
    *wo = static_cast<int64_t>(std::floor(k.w * o.scale_factor()->second));
    *sh = 1.0 / o.scale_factor()->first, *sw = 1.0 / o.scale_factor()->second;
  }
  if (o.mode() == F::InterpolateMode::Bilinear && o.align_corners().value_or(false)) {
    *sh = *ho > 1 ? static_cast<double>(k.h - 1) / (*ho - 1) : 0.0;
    *sw = *wo > 1 ? static_cast<double>(k.w - 1) / (*wo - 1) : 0.0;
  }
}

Values up_ref(const UpCase& k, const Values& x) {
  int64_t ho, wo;
  double sh, sw;
  up_geometry(k, &ho, &wo, &sh, &sw);
  const bool align = k.options.align_corners().value_or(false);
  // Bilinear: source coordinate, then the two neighbours and their weights.
  auto taps = [&](int64_t o, int64_t in, double scale, int64_t* i0, int64_t* i1, double* l1) {
    double src = align ? o * scale : (o + 0.5) * scale - 0.5;
    src = std::max(src, 0.0);
    *i0 = std::min<int64_t>(static_cast<int64_t>(std::floor(src)), in - 1);
    *i1 = std::min<int64_t>(*i0 + 1, in - 1);
    *l1 = std::min(src - *i0, 1.0);
  };
  Values out;
  for (int64_t p = 0; p < k.n * k.c; ++p)
    for (int64_t i = 0; i < ho; ++i)
      for (int64_t j = 0; j < wo; ++j) {
        const double* plane = x.data() + p * k.h * k.w;
        if (k.options.mode() == F::InterpolateMode::Nearest) {
          out.push_back(plane[nearest_src(i, k.h, sh) * k.w + nearest_src(j, k.w, sw)]);
          continue;
        }
        int64_t y0, y1, z0, z1;
        double ly, lz;
        taps(i, k.h, sh, &y0, &y1, &ly);
        taps(j, k.w, sw, &z0, &z1, &lz);
        out.push_back((1 - ly) * ((1 - lz) * plane[y0 * k.w + z0] + lz * plane[y0 * k.w + z1]) +
                      ly * ((1 - lz) * plane[y1 * k.w + z0] + lz * plane[y1 * k.w + z1]));
      }
  return out;
}

using Mode = F::InterpolateMode;
const UpCase kUpCases[] = {
    {2, 3, 4, 5, F::InterpolateOptions().scale_factor(2)},
    {1, 2, 3, 4, F::InterpolateOptions().size({5, 7})},
    {1, 2, 4, 6, F::InterpolateOptions().size({3, 3})},  // downsampling
    {2, 2, 4, 5, F::InterpolateOptions().mode(Mode::Bilinear).size({6, 9})},
    {2, 2, 4, 5, F::InterpolateOptions().mode(Mode::Bilinear).scale_factor(2)},
    {1, 3, 4, 5, F::InterpolateOptions().mode(Mode::Bilinear).align_corners(true).size({7, 3})},
    {1, 1, 3, 4, F::InterpolateOptions().mode(Mode::Bilinear).align_corners(true).size({1, 6})},
    {1, 2, 5, 4, F::InterpolateOptions().mode(Mode::Bilinear).scale_factor(1.5, 0.5)},
};

}  // namespace

TEST(MaxPool2d, ForwardIndicesAndBackwardMatchReferenceForEveryDtype) {
  int index = 0;
  for (const PoolCase& k : kPoolCases) {
    for (mt::DType dt : float_types()) {
      auto op = [&](const std::vector<mt::Tensor>& in) {
        return F::max_pool2d(in[0], k.kernel, k.stride, k.padding, k.dilation, k.ceil_mode);
      };
      auto ref = [&](const std::vector<Values>& in) { return pool_ref(k, in[0]); };
      const mt::Tensor x = distinct_values({k.n, k.c, k.h, k.w}, dt, 40 + index);
      // Pooling picks elements: the values (and gradients) are exact, whatever the dtype.
      check_op("pool case " + std::to_string(index) + " " + mt::dtype_name(dt), op, ref, {x}, {0}, tolerance_for(dt));
      std::vector<int64_t> expected;
      pool_ref(k, to_doubles(x), &expected);
      auto [out, indices] = F::max_pool2d_with_indices(x, k.kernel, k.stride, k.padding, k.dilation, k.ceil_mode);
      EXPECT_EQ(indices.dtype(), mt::kInt64);
      EXPECT_EQ(indices.to_vector<int64_t>(), expected) << "case " << index << " " << dt;
    }
    ++index;
  }
  const PoolCase& k = kPoolCases[1];
  mt::Tensor x = distinct_values({k.n, k.c, k.w, k.h}, mt::kFloat64, 3).transpose(2, 3);
  EXPECT_TRUE(gradcheck([&](const std::vector<mt::Tensor>& in) {
    return F::max_pool2d(in[0], k.kernel, k.stride, k.padding, k.dilation, k.ceil_mode);
  }, {x}));
}

TEST(MaxPool2d, TiesPickTheFirstMaximumAndNaNPropagates) {
  mt::Tensor x = mt::ones({1, 1, 2, 4});
  auto [out, idx] = F::max_pool2d_with_indices(x, 2);
  EXPECT_EQ(idx.to_vector<int64_t>(), (std::vector<int64_t>{0, 2}));
  mt::Tensor xg = mt::ones({1, 1, 2, 4}, mt::TensorOptions().requires_grad(true));
  F::max_pool2d(xg, 2).sum().backward();
  // Built element by element: GCC 12.2 with AVX-512 miscompiles the literal {1, 0, 1, 0, 0, 0, 0, 0}
  // (a 32-byte constant whose upper half is zero) into a broadcast of its first 8 bytes.
  std::vector<float> expected(8, 0.0f);
  expected[0] = expected[2] = 1.0f;
  EXPECT_EQ(xg.grad().to_vector<float>(), expected);
  mt::Tensor xn = mt::from_vector(std::vector<float>{1, NAN, 3, 4}, {1, 1, 2, 2});
  EXPECT_TRUE(std::isnan(F::max_pool2d(xn, 2).item<float>()));
}

TEST(Interpolate, NearestAndBilinearMatchReferenceForEveryDtype) {
  int index = 0;
  for (const UpCase& k : kUpCases) {
    for (mt::DType dt : float_types()) {
      auto op = [&](const std::vector<mt::Tensor>& in) { return F::interpolate(in[0], k.options); };
      auto ref = [&](const std::vector<Values>& in) { return up_ref(k, in[0]); };
      check_op("upsample case " + std::to_string(index) + " " + mt::dtype_name(dt), op, ref,
               {random_tensor({k.n, k.c, k.h, k.w}, dt, 50 + index)}, {0}, tolerance_for(dt));
    }
    ++index;
  }
  for (int i : {1, 5}) {
    const UpCase& k = kUpCases[i];
    mt::Tensor x = random_tensor({k.n, k.c, k.w, k.h}, mt::kFloat64, 5).transpose(2, 3);
    EXPECT_TRUE(gradcheck([&](const std::vector<mt::Tensor>& in) { return F::interpolate(in[0], k.options); }, {x}))
        << "case " << i;
  }
}

TEST(Interpolate, UpsamplingByTwoRepeatsPixelsAndAlignedCornersKeepCorners) {
  mt::Tensor x = mt::from_vector(std::vector<float>{1, 2, 3, 4}, {1, 1, 2, 2});
  EXPECT_EQ(F::interpolate(x, F::InterpolateOptions().scale_factor(2)).to_vector<float>(),
            (std::vector<float>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}));
  const auto v = F::interpolate(x, F::InterpolateOptions().mode(Mode::Bilinear).align_corners(true).size({3, 3}))
                     .to_vector<float>();
  EXPECT_EQ(v, (std::vector<float>{1, 1.5, 2, 2, 2.5, 3, 3, 3.5, 4}));
}

TEST(PoolUpsample, KernelsWriteEveryOutputElement) {
  const mt::DeviceType cpu = mt::DeviceType::CPU;
  for (mt::DType dt : float_types()) {
    const mt::Tensor x = random_tensor({2, 3, 5, 6}, dt, 60);
    mt::backends::Pool2dParams p;
    p.kernel_h = p.kernel_w = 3, p.stride_h = p.stride_w = 2, p.pad_h = p.pad_w = 1;
    mt::Tensor out = poisoned({2, 3, 3, 3}, dt), idx = poisoned({2, 3, 3, 3}, mt::kInt64);
    mt::backends::max_pool2d(cpu, x, p, out, idx);
    EXPECT_TRUE(all_finite(out)) << dt;
    const std::vector<int64_t> iv = idx.to_vector<int64_t>();
    EXPECT_EQ(std::count(iv.begin(), iv.end(), -12345), 0) << dt;
    mt::Tensor gx = poisoned(x.shape(), dt);
    mt::backends::max_pool2d_backward(cpu, out, idx, gx);
    EXPECT_TRUE(all_finite(gx)) << dt;
    for (auto mode : {mt::backends::UpsampleMode::Nearest, mt::backends::UpsampleMode::Bilinear}) {
      mt::backends::Upsample2dParams u;
      u.mode = mode, u.scale_h = 5.0 / 11, u.scale_w = 6.0 / 4;
      mt::Tensor up = poisoned({2, 3, 11, 4}, dt), gu = poisoned(x.shape(), dt);
      mt::backends::upsample2d(cpu, x, u, up);
      mt::backends::upsample2d_backward(cpu, up, u, gu);
      EXPECT_TRUE(all_finite(up)) << dt;
      EXPECT_TRUE(all_finite(gu)) << dt;
    }
  }
}

TEST(PoolUpsample, BadArgumentsRaiseErrorsNamingTheOp) {
  const mt::Tensor x = mt::randn({1, 2, 5, 5});
  expect_error([&] { F::max_pool2d(x, 3, 1, 2); }, "max_pool2d: padding (2, 2) must be non-negative and at most half");
  expect_error([&] { F::max_pool2d(x, 2, mt::nn::IntPair(0)); }, "max_pool2d: stride must be positive");
  expect_error([&] { F::max_pool2d(x, 6); }, "max_pool2d: input [1, 2, 5, 5] float32 cpu is too small");
  expect_error([&] { F::max_pool2d(mt::randn({2, 5, 5}), 2); }, "max_pool2d: expected input [N, C, H, W]");
  expect_error([&] { F::interpolate(x, F::InterpolateOptions()); }, "exactly one of size and scale_factor");
  expect_error([&] { F::interpolate(x, F::InterpolateOptions().size(4).scale_factor(2)); }, "exactly one of");
  expect_error([&] { F::interpolate(x, F::InterpolateOptions().size(4).align_corners(true)); },
               "align_corners can only be set with the bilinear mode");
  expect_error([&] { F::interpolate(x, F::InterpolateOptions().scale_factor(-1)); }, "scale_factor must be positive");
  expect_error([&] { F::interpolate(x, F::InterpolateOptions().size({0, 3})); }, "output size must be positive");
}
