// The fp32 matrix product's fixed blocks (src/backends/cpu/gemm_blocks.h): the cut covers the
// output and depends only on the shape; the product at the trainers' shapes, in every operand
// layout, matches an fp64 reference into NaN-poisoned outputs and keeps every bit whether it runs
// on all threads, on one thread during a governor cool-down, or inside another parallel region.
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backends/cpu/gemm_blocks.h"
#include "kernels/cpu/gemm_eigen.h"
#include "backends/cpu/threads.h"

namespace mixtrain::backends::cpu {
namespace {

TEST(CpuGemmBlocks, CutCoversTheOutputInOrder) {
  for (auto [m, n, k] : {std::array<int64_t, 3>{512, 1000, 215}, {32, 1000, 215}, {1000, 32, 215}, {215, 1000, 32},
                         {64, 1024, 576}, {576, 1024, 64}, {7, 5, 3}, {100000, 33, 1}, {4096, 4096, 4096}}) {
    const GemmBlocks blocks = plan_gemm_blocks(m, n, k);
    const std::string shape = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
    EXPECT_EQ(blocks.extent, blocks.split_rows ? m : n) << shape;
    EXPECT_GE(blocks.count, 1) << shape;
    EXPECT_LE(blocks.count, kGemmMaxBlocks) << shape;
    EXPECT_EQ(blocks.count & (blocks.count - 1), 0) << shape << ": a power of two";
    EXPECT_EQ(blocks.begin(0), 0) << shape;
    EXPECT_EQ(blocks.begin(blocks.count), blocks.extent) << shape;
    for (int64_t b = 0; b < blocks.count; ++b) {
      EXPECT_LT(blocks.begin(b), blocks.begin(b + 1)) << shape << " block " << b;
      if (b > 0) EXPECT_EQ(blocks.begin(b) % 16, 0) << shape << " block " << b;
    }
    if (blocks.count > 1) EXPECT_GE(m * n * k / blocks.count, kGemmBlockMinMacs) << shape;
  }
  EXPECT_EQ(plan_gemm_blocks(7, 5, 3).count, 1);
  EXPECT_GT(plan_gemm_blocks(512, 1000, 215).count, 1);
}

// A [rows, cols] operand, row-major or column-major.
struct Operand {
  int64_t rows, cols;
  bool col_major;
  std::vector<float> data;
  double at(int64_t r, int64_t c) const { return data[static_cast<size_t>(col_major ? c * rows + r : r * cols + c)]; }
  GemmMatrix<float> matrix() const {
    return col_major ? GemmMatrix<float>{data.data(), rows, cols, 1, rows}
                     : GemmMatrix<float>{data.data(), rows, cols, cols, 1};
  }
};

Operand random_operand(int64_t rows, int64_t cols, bool col_major, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Operand o{rows, cols, col_major, std::vector<float>(static_cast<size_t>(rows * cols))};
  for (float& v : o.data) v = u(rng);
  return o;
}

// C = A * B (plus `init` when accumulating) into an output of leading dimension n + 3 whose
// padding and cells start as NaN, so a cell left unwritten or written twice shows.
std::vector<float> product(const Operand& a, const Operand& b, bool accumulate, const std::vector<float>& init) {
  const int64_t ldc = b.cols + 3;
  std::vector<float> out(static_cast<size_t>(a.rows * ldc), std::numeric_limits<float>::quiet_NaN());
  if (accumulate)
    for (int64_t r = 0; r < a.rows; ++r)
      for (int64_t c = 0; c < b.cols; ++c) out[static_cast<size_t>(r * ldc + c)] = init[static_cast<size_t>(r * b.cols + c)];
  gemm_product(GemmCall<float>{a.matrix(), b.matrix(), out.data(), ldc, accumulate});
  return out;
}

void expect_near_reference(const std::vector<float>& out, const Operand& a, const Operand& b, bool accumulate,
                           const std::vector<float>& init, const std::string& what) {
  const int64_t ldc = b.cols + 3;
  int64_t bad = 0;
  for (int64_t r = 0; r < a.rows; ++r) {
    for (int64_t c = 0; c < b.cols; ++c) {
      const double got = out[static_cast<size_t>(r * ldc + c)];
      // Every cell is written; one in 7 (every row and column among them) is checked in fp64.
      if (std::isnan(got) && bad++ < 3) ADD_FAILURE() << what << " (" << r << ", " << c << ") not written";
      if ((r * ldc + c) % 7 != 0) continue;
      double ref = accumulate ? init[static_cast<size_t>(r * b.cols + c)] : 0.0, mag = std::fabs(ref);
      for (int64_t i = 0; i < a.cols; ++i) {
        ref += a.at(r, i) * b.at(i, c);
        mag += std::fabs(a.at(r, i) * b.at(i, c));
      }
      // fp32 sums: a few units of rounding per term, relative to the sum of magnitudes.
      if (!(std::fabs(got - ref) <= 1e-5 * mag + 1e-6) && bad++ < 3)
        ADD_FAILURE() << what << " (" << r << ", " << c << "): " << got << " vs " << ref;
    }
    for (int64_t c = b.cols; c < ldc; ++c)
      if (!std::isnan(out[static_cast<size_t>(r * ldc + c)]) && bad++ < 3) ADD_FAILURE() << what << ": padding written";
  }
  EXPECT_EQ(bad, 0) << what;
}

bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

struct Shape {
  int64_t m, n, k;
  const char* what;
};

// The GEMMs of the MLP 215-1000-500-1 step (batch 512 and 32: forward, input gradient, weight
// gradient) and of a UNet 3x3 convolution as im2col (64 channels, 32x32: forward, weight and
// input gradients), plus an odd shape that is cut into blocks of unequal width.
const Shape kShapes[] = {
    {512, 1000, 215, "mlp fc1 forward b512"},  {512, 215, 1000, "mlp fc1 dx b512"},
    {1000, 215, 512, "mlp fc1 dw b512"},       {512, 500, 1000, "mlp fc2 forward b512"},
    {32, 1000, 215, "mlp fc1 forward b32"},    {32, 215, 1000, "mlp fc1 dx b32"},
    {1000, 215, 32, "mlp fc1 dw b32"},         {64, 1024, 576, "unet conv forward"},
    {64, 576, 1024, "unet conv dw"},           {576, 1024, 64, "unet conv dx"},
    {301, 777, 129, "odd"},
};

// Every layout of the operands (the dispatcher sees a or b transposed in the backward GEMMs).
TEST(CpuGemmBlocks, MatchesFp64ReferenceInEveryLayout) {
  std::mt19937 rng(7);
  for (const Shape& s : kShapes) {
    for (int layout = 0; layout < 4; ++layout) {
      const Operand a = random_operand(s.m, s.k, layout & 1, rng), b = random_operand(s.k, s.n, layout & 2, rng);
      const bool accumulate = layout == 3;
      std::vector<float> init(static_cast<size_t>(s.m * s.n));
      for (float& v : init) v = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
      const std::string what = std::string(s.what) + " layout " + std::to_string(layout);
      expect_near_reference(product(a, b, accumulate, init), a, b, accumulate, init, what);
    }
  }
}

// The same product on all threads, during a cool-down (one thread) and inside a parallel region
// (the blocks in turn on its thread) keeps every bit.
TEST(CpuGemmBlocks, BitIdenticalWhateverTheThreads) {
  std::mt19937 rng(11);
  ThreadGovernor& g = governor();
  for (const Shape& s : kShapes) {
    for (int layout = 0; layout < 4; ++layout) {
      const Operand a = random_operand(s.m, s.k, layout & 1, rng), b = random_operand(s.k, s.n, layout & 2, rng);
      const std::string what = std::string(s.what) + " layout " + std::to_string(layout);
      const std::vector<float> threaded = product(a, b, false, {});
      std::vector<float> nested;
#pragma omp parallel num_threads(2)
      {
        if (omp_get_thread_num() == 0) nested = product(a, b, false, {});
      }
      EXPECT_TRUE(same_bits(threaded, nested)) << what << ": inside a parallel region";
      if (g.adaptive()) {
        g.hold_serial(now_ns() + 3600 * int64_t{1'000'000'000});
        const std::vector<float> serial = product(a, b, false, {});
        g.hold_serial(0);
        ASSERT_TRUE(regions_parallel(now_ns()));
        EXPECT_TRUE(same_bits(threaded, serial)) << what << ": during a cool-down";
      }
    }
  }
  if (!g.adaptive())
    GTEST_SKIP() << "the thread count is fixed at " << g.full()
                 << " here (OMP_NUM_THREADS, MIXTRAIN_CPU_ADAPTIVE=0 or one CPU): only the nested region was compared";
}

}  // namespace
}  // namespace mixtrain::backends::cpu
