// CUDA reductions (sum, max, min with indices, kept dims) against the CPU backend, on the layouts
// that take different kernel paths: rows, columns, axes split across blocks, short and long rows.
#include "backends/cuda_test_util.h"

namespace mixtrain::testing {
namespace {

using backends::ReduceOp;

const View3 kViews[] = {{64, 300, 1}, {3, 500, 70}, {1, 1 << 20, 1}, {2, 200000, 3}, {1000, 7, 1}, {5, 1, 33}};

// An fp32 sum of n values of magnitude up to m differs from the CPU's fp64 sum by rounding errors
// of the partial sums' scale (up to about n * eps * m), whatever the result: a sum near zero by
// cancellation keeps that absolute error.
Tolerance sum_tolerance(DType dt, int64_t n, double m) {
  Tolerance t = tolerance_for(dt);
  if (dt == kFloat32) t.atol = 1.2e-7 * static_cast<double>(n) * m;
  return t;
}

class CudaReduce : public CudaTest {};

TEST_F(CudaReduce, SumMaxMinWithIndicesMatchTheCpu) {
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32}) {
    for (const View3& v : kViews) {
      const Tensor x = random_tensor({v.outer, v.n, v.inner}, kFloat32, 21, -50, 50).to(dt);
      const DType sum_dt = is_floating(dt) ? dt : kInt64;
      const std::string what = std::string(dtype_name(dt)) + " [" + std::to_string(v.outer) + ", " +
                               std::to_string(v.n) + ", " + std::to_string(v.inner) + "]";
      compare_backends("sum " + what, {x}, {{{v.outer, v.inner}, sum_dt, "sum", is_floating(dt) ? sum_tolerance(dt, v.n, 50.0) : exact()}},
                       [v](auto& b, const auto& in, const auto& out) {
                         backends::reduce(b, ReduceOp::Sum, in[0], v.outer, v.n, v.inner, out[0], Tensor());
                       });
      for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min}) {
        compare_backends("max/min " + what, {x},
                         {{{v.outer, v.inner}, dt, "value", exact()}, {{v.outer, v.inner}, kInt64, "index", exact()}},
                         [v, op](auto& b, const auto& in, const auto& out) {
                           backends::reduce(b, op, in[0], v.outer, v.n, v.inner, out[0], out[1]);
                         });
      }
    }
  }
}

TEST_F(CudaReduce, MaxKeepsTheFirstNanAndTheFirstOfEqualMaxima) {
  std::vector<float> v(5000, 1.0f);
  v[10] = 7.0f, v[4000] = 7.0f;  // ties: the first wins
  Tensor x = from_vector(v, {1, 5000, 1});
  std::vector<float> w = v;
  w[3000] = std::nanf(""), w[4500] = std::nanf("");  // NaN wins, the first one
  Tensor y = from_vector(w, {1, 5000, 1});
  for (const Tensor& t : {x, y}) {
    compare_backends("ties and NaN", {t}, {{{1, 1}, kFloat32, "value", exact()}, {{1, 1}, kInt64, "index", exact()}},
                     [](auto& b, const auto& in, const auto& out) {
                       backends::reduce(b, ReduceOp::Max, in[0], 1, 5000, 1, out[0], out[1]);
                     });
  }
}

// Elements equal to the kernels' starting value (-inf for max, +inf for min) are picked like any
// other, at their first index, on every kernel path: threads with no element of their own start
// from that value and must not win the tie.
TEST_F(CudaReduce, MaxAndMinOfInfiniteRowsMatchTheCpu) {
  for (DType dt : float_types()) {
    for (const View3& v : kViews) {
      for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min}) {
        const Tensor x = full({v.outer, v.n, v.inner}, op == ReduceOp::Max ? -INFINITY : INFINITY, TensorOptions(dt));
        const std::string what = std::string(dtype_name(dt)) + (op == ReduceOp::Max ? " max [" : " min [") +
                                 std::to_string(v.outer) + ", " + std::to_string(v.n) + ", " + std::to_string(v.inner) + "]";
        compare_backends("infinite " + what, {x},
                         {{{v.outer, v.inner}, dt, "value", exact()}, {{v.outer, v.inner}, kInt64, "index", exact()}},
                         [v, op](auto& b, const auto& in, const auto& out) {
                           backends::reduce(b, op, in[0], v.outer, v.n, v.inner, out[0], out[1]);
                         });
      }
    }
  }
}

TEST_F(CudaReduce, PublicReductionsOnDeviceTensors) {
  const Tensor x = random_tensor({30, 40}, kFloat32, 26);
  const Tensor d = x.to(gpu_device());
  EXPECT_TRUE(all_close(d.sum({1}), to_doubles(x.sum({1})), tolerance_for(kFloat32)));
  EXPECT_TRUE(all_close(d.mean(), to_doubles(x.mean()), tolerance_for(kFloat32)));
  EXPECT_TRUE(all_equal(d.argmax(0), to_doubles(x.argmax(0))));
  EXPECT_TRUE(all_close(d.softmax(0), to_doubles(x.softmax(0)), tolerance_for(kFloat32)));
  EXPECT_EQ(d.sum().device(), gpu_device());
}

// A bias gradient's sum over {0, 2, 3} (and other dims around the kept ones) runs as two
// reductions on the device, with fp32 partial sums for half inputs.
TEST_F(CudaReduce, SumsAroundKeptDimsMatchTheCpu) {
  const std::vector<std::vector<int64_t>> cases = {{0, 2, 3}, {0, 3}, {0, 1, 3}};
  for (DType dt : float_types()) {
    const Tensor x = random_tensor({3, 5, 7, 9}, dt, 27);
    const Tensor d = x.to(gpu_device());
    for (const auto& dims : cases) {
      SCOPED_TRACE(::testing::Message() << dt << " dims " << ::testing::PrintToString(dims));
      const Tensor got = d.sum(dims);
      EXPECT_EQ(got.dtype(), dt);
      EXPECT_EQ(got.device(), gpu_device());
      EXPECT_TRUE(all_close(got, to_doubles(x.to(kFloat64).sum(dims)), tolerance_for(dt)));
    }
  }
}

// topk: the same picks, in the same order (ties by index, NaN first when largest), as the CPU,
// for short and long rows and k from 1 to a whole row; its backward scatters into zeros.
TEST_F(CudaReduce, TopkMatchesTheCpu) {
  struct Rows {
    int64_t rows, n, k;
  };
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32}) {
    for (const Rows& r : {Rows{64, 300, 7}, Rows{1, 5000, 100}, Rows{3, 10, 10}, Rows{70000, 4, 1}}) {
      Tensor x = random_tensor({r.rows, r.n}, kFloat32, 31, -20, 20).to(dt);  // half types: ties
      if (is_floating(dt)) x.select(0, 0).narrow(0, 1, 2).fill_(NAN);
      for (bool largest : {true, false}) {
        const std::string what = std::string(dtype_name(dt)) + " [" + std::to_string(r.rows) + ", " +
                                 std::to_string(r.n) + "] k " + std::to_string(r.k) + (largest ? " largest" : " smallest");
        compare_backends("topk " + what, {x}, {{{r.rows, r.k}, dt, "values", exact()}, {{r.rows, r.k}, kInt64, "indices", exact()}},
                         [r, largest](auto& b, const auto& in, const auto& out) {
                           backends::topk(b, in[0], r.rows, r.n, r.k, largest, out[0], out[1]);
                         });
      }
    }
  }
  for (DType dt : float_types()) {
    const Tensor g = random_tensor({5, 3}, dt, 32);
    const Tensor idx = from_vector(std::vector<int64_t>{4, 0, 2, 1, 3, 0, 0, 1, 2, 6, 5, 4, 2, 6, 3}, {5, 3});
    compare_backends(std::string("topk_backward ") + dtype_name(dt), {g, idx}, {{{5, 7}, dt, "grad", exact()}},
                     [](auto& b, const auto& in, const auto& out) { backends::topk_backward(b, in[0], in[1], 5, 7, 3, out[0]); });
  }
  Tensor x = random_tensor({4, 9}, kFloat32, 33).to(gpu_device()).set_requires_grad(true);
  auto [values, indices] = x.topk(3, 0);
  values.sum().backward();
  EXPECT_EQ(x.grad().device(), gpu_device());
  EXPECT_EQ(x.grad().sum().item<float>(), 27.0f);
}

}  // namespace
}  // namespace mixtrain::testing
