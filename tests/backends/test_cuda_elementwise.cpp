// CUDA elementwise kernels against the CPU backend: unary ops and derivatives, binary ops with
// broadcasting and strided operands, scalars, comparisons, where, copies between every dtype
// pair, fills and the counter-based random fill.
#include "backends/cuda_test_util.h"

namespace mixtrain::testing {
namespace {

using backends::BinaryOp;
using backends::CompareOp;
using backends::UnaryOp;

const UnaryOp kUnary[] = {UnaryOp::Neg,     UnaryOp::Exp,  UnaryOp::Log,  UnaryOp::Sqrt, UnaryOp::Rsqrt, UnaryOp::Tanh,
                          UnaryOp::Sigmoid, UnaryOp::Relu, UnaryOp::Gelu, UnaryOp::Abs,  UnaryOp::Pow,   UnaryOp::Square};
const BinaryOp kBinary[] = {BinaryOp::Add, BinaryOp::Sub,     BinaryOp::Mul,    BinaryOp::Div,
                            BinaryOp::Pow, BinaryOp::Maximum, BinaryOp::Minimum};

bool needs_positive(UnaryOp op) {
  return op == UnaryOp::Log || op == UnaryOp::Sqrt || op == UnaryOp::Rsqrt || op == UnaryOp::Pow;
}

class CudaElementwise : public CudaTest {};

TEST_F(CudaElementwise, UnaryOpsMatchTheCpu) {
  for (DType dt : float_types()) {
    for (UnaryOp op : kUnary) {
      const Tensor x = needs_positive(op) ? random_tensor({37, 65}, dt, 1, 0.1, 3.0) : random_tensor({37, 65}, dt, 1, -3, 3);
      compare_backends(std::string(backends::unary_op_name(op)) + " " + dtype_name(dt), {x},
                       {{x.shape(), dt, "out", tolerance_for(dt)}}, [op](auto& b, const auto& in, const auto& out) {
                         backends::unary(b, op, in[0], out[0], 1.7);
                       });
    }
  }
}

TEST_F(CudaElementwise, UnaryBackwardMatchesTheCpu) {
  for (DType dt : float_types()) {
    for (UnaryOp op : kUnary) {
      const Tensor x = needs_positive(op) ? random_tensor({33, 17}, dt, 2, 0.2, 2.0) : random_tensor({33, 17}, dt, 2, -2, 2);
      const Tensor g = random_tensor({33, 17}, dt, 3);
      compare_backends(std::string(backends::unary_op_name(op)) + " backward " + dtype_name(dt), {x, g},
                       {{x.shape(), dt, "y", tolerance_for(dt)}, {x.shape(), dt, "grad_x", tolerance_for(dt)}},
                       [op](auto& b, const auto& in, const auto& out) {
                         backends::unary(b, op, in[0], out[0], 1.7);
                         backends::unary_backward(b, op, in[0], out[0], in[1], out[1], 1.7);
                       });
    }
  }
}

TEST_F(CudaElementwise, BinaryOpsBroadcastAndStridedOperands) {
  for (DType dt : float_types()) {
    for (BinaryOp op : kBinary) {
      const double lo = op == BinaryOp::Pow || op == BinaryOp::Div ? 0.5 : -2.0;
      const Tensor a = random_tensor({6, 40, 9}, dt, 4, lo, 2.0);
      const Tensor b = random_tensor({9, 40}, dt, 5, lo, 2.0);  // used transposed and broadcast
      compare_backends(std::string(backends::binary_op_name(op)) + " " + dtype_name(dt), {a, b},
                       {{a.shape(), dt, "out", tolerance_for(dt)}}, [op](auto& bk, const auto& in, const auto& out) {
                         const Tensor bt = in[1].t().unsqueeze(0).expand(in[0].shape());
                         backends::binary(bk, op, in[0], bt, out[0]);
                       });
      compare_backends(std::string(backends::binary_op_name(op)) + " scalar " + dtype_name(dt), {a},
                       {{a.shape(), dt, "a op s", tolerance_for(dt)}, {a.shape(), dt, "s op a", tolerance_for(dt)}},
                       [op](auto& bk, const auto& in, const auto& out) {
                         backends::binary_scalar(bk, op, in[0], 1.25, false, out[0]);
                         backends::binary_scalar(bk, op, in[0].transpose(0, 2).contiguous().transpose(0, 2), 1.25, true, out[1]);
                       });
    }
  }
}

TEST_F(CudaElementwise, LargeContiguousAndMisalignedOperands) {
  // Past the grid cap (grid-stride loops), odd lengths (vector tails) and offset views (no
  // vectorized path).
  for (DType dt : {kFloat32, kFloat16}) {
    const Tensor a = random_tensor({3 * 1000 * 1000 + 3}, dt, 6), b = random_tensor({3 * 1000 * 1000 + 3}, dt, 7);
    compare_backends(std::string("add large ") + dtype_name(dt), {a, b}, {{a.shape(), dt, "out", tolerance_for(dt)}},
                     [](auto& bk, const auto& in, const auto& out) { backends::binary(bk, BinaryOp::Add, in[0], in[1], out[0]); });
    compare_backends(std::string("mul offset ") + dtype_name(dt), {a, b},
                     {{{999}, dt, "out", tolerance_for(dt)}}, [](auto& bk, const auto& in, const auto& out) {
                       backends::binary(bk, BinaryOp::Mul, in[0].narrow(0, 1, 999), in[1].narrow(0, 3, 999), out[0]);
                     });
  }
}

TEST_F(CudaElementwise, ComparisonsAndWhere) {
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32}) {
    const Tensor a = random_tensor({50, 31}, kFloat32, 8, -3, 3).to(dt);
    // Half of the pairs equal.
    const Tensor b = where(ge(random_tensor({50, 31}, kFloat32, 10), zeros({})), random_tensor({50, 31}, kFloat32, 8, -3, 3),
                           random_tensor({50, 31}, kFloat32, 9, -3, 3))
                         .to(dt);
    for (CompareOp op : {CompareOp::Eq, CompareOp::Ne, CompareOp::Lt, CompareOp::Le, CompareOp::Gt, CompareOp::Ge}) {
      compare_backends(std::string("compare ") + dtype_name(dt), {a, b}, {{a.shape(), kBool, "mask", exact()}},
                       [op](auto& bk, const auto& in, const auto& out) { backends::compare(bk, op, in[0], in[1], out[0]); });
    }
    if (is_floating(dt))
      compare_backends(std::string("where ") + dtype_name(dt), {a, b, lt(a, b)}, {{a.shape(), dt, "out", exact()}},
                       [](auto& bk, const auto& in, const auto& out) { backends::where(bk, in[2], in[0], in[1], out[0]); });
  }
}

TEST_F(CudaElementwise, CopiesBetweenAllDtypesRoundLikeTheCpu) {
  const std::vector<DType> all{kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kInt32, kBool};
  // Values that exercise rounding: ties, overflow to inf in fp16, subnormals, integers.
  Tensor src = mul(random_tensor({64, 33}, kFloat64, 11, -1, 1), 70000.0);
  src = where(gt(random_tensor({64, 33}, kFloat64, 12), zeros({}, TensorOptions(kFloat64))), src,
              mul(random_tensor({64, 33}, kFloat64, 13), 1e-6));
  for (DType from : all) {
    const Tensor s = src.to(from);
    for (DType to : all) {
      // fp16 holds infs here, and float -> integer of inf is undefined (the CPU and GPU differ).
      if (from == kFloat16 && (to == kInt64 || to == kInt32)) continue;
      compare_backends(std::string("copy ") + dtype_name(from) + " -> " + dtype_name(to), {s},
                       {{s.shape(), to, "contiguous", exact()}, {{33, 64}, to, "transposed", exact()}},
                       [to](auto& bk, const auto& in, const auto& out) {
                         backends::copy(bk, in[0], out[0]);
                         backends::copy(bk, in[0].t(), out[1]);
                       });
    }
  }
}

TEST_F(CudaElementwise, HostDeviceRoundTripsKeepEveryBit) {
  for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kInt32, kBool}) {
    const Tensor h = random_tensor({129, 7}, kFloat64, 14, -100, 100).to(dt);
    const Tensor d = h.to(gpu_device());
    EXPECT_TRUE(all_equal(d.to(Device::cpu()), to_doubles(h))) << dtype_name(dt);
    // Strided sources on either side, converting on the way.
    EXPECT_TRUE(all_equal(h.t().to(gpu_device(), kFloat64), to_doubles(h.t().contiguous().to(kFloat64))));
    EXPECT_TRUE(all_equal(d.t().to(Device::cpu(), kFloat64), to_doubles(h.t().contiguous().to(kFloat64))));
  }
}

TEST_F(CudaElementwise, FillAndRandomMatchTheCpu) {
  for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kInt32, kBool}) {
    compare_backends(std::string("fill ") + dtype_name(dt), {}, {{{17, 5}, dt, "out", exact()}},
                     [](auto& bk, const auto&, const auto& out) { backends::fill(bk, out[0], 3.14159); });
  }
  for (DType dt : float_types()) {
    compare_backends(std::string("uniform ") + dtype_name(dt), {}, {{{1000, 37}, dt, "out", exact()}},
                     [](auto& bk, const auto&, const auto& out) {
                       backends::random(bk, out[0], backends::RandomKind::Uniform, 42, 1000);
                     });
    // Normal draws go through log and cos, whose last fp64 bit may differ between the host libm
    // and the device: compare with a tolerance, not exactly.
    compare_backends(std::string("normal ") + dtype_name(dt), {},
                     {{{1000, 37}, dt, "out", dt == kFloat64 ? Tolerance{1e-14, 1e-12, 1e-14} : tolerance_for(dt)}},
                     [](auto& bk, const auto&, const auto& out) {
                       backends::random(bk, out[0], backends::RandomKind::Normal, 42, 1000);
                     });
  }
}

TEST_F(CudaElementwise, DropoutDrawsTheCpusMaskAndScale) {
  for (DType dt : float_types()) {
    const Tensor x = random_tensor({1000, 33}, dt, 15, -4, 4);
    compare_backends(std::string("dropout ") + dtype_name(dt), {x}, {{x.shape(), dt, "out", exact()}},
                     [](auto& bk, const auto& in, const auto& out) { backends::dropout(bk, in[0], 0.3, 99, 12345, out[0]); });
  }
}

TEST_F(CudaElementwise, RandnOnTheDeviceEqualsRandnOnTheHost) {
  manual_seed(123);
  const Tensor h = randn({300, 11});
  manual_seed(123);
  const Tensor d = randn({300, 11}, TensorOptions().device(gpu_device()));
  EXPECT_TRUE(all_close(d, to_doubles(h), tolerance_for(kFloat32)));
}

}  // namespace
}  // namespace mixtrain::testing
