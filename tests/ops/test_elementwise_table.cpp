// Every elementwise op x every backend present x every floating dtype against the fp64 reference
// rows of elementwise_reference.h: the kernels write into poisoned outputs, the public functions
// are differentiated against finite differences. The test walks the op lists of
// mixtrain/base/elementwise_ops.h (as ggml's test-backend-ops walks its op enum), so an op added
// there is tested here without a new test.
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "backends/all_kernels.h"
#include "backends/cuda_test_util.h"
#include "ops/elementwise_reference.h"
#include "ops/op_samples.h"
#include "support/testing.h"

namespace mt = mixtrain;
using mt::Device;
using mt::DType;
using mt::Tensor;
using mt::backends::BinaryOp;
using mt::backends::CompareOp;
using mt::backends::UnaryOp;
using mt::testing::all_close;
using mt::testing::float_types;
using mt::testing::to_doubles;
using mt::testing::tolerance_for;

namespace {

// The public function of each list entry: the shared registry's (op_samples.h), generated from
// the same X-macros as the library's.
using mt::testing::BinaryEntry;
using mt::testing::UnaryEntry;
const auto& kUnaryOps = mt::testing::kUnaryEntries;
const auto& kBinaryOps = mt::testing::kBinaryEntries;

struct CompareEntry {
  CompareOp op;
  const char* name;
  Tensor (*call)(const Tensor&, const Tensor&);
};
#define MT_COMPARE_ROW(code, name) {CompareOp::code, #name, [](const Tensor& a, const Tensor& b) { return mt::name(a, b); }},
const CompareEntry kCompareOps[] = {MT_COMPARE_OPS(MT_COMPARE_ROW)};
#undef MT_COMPARE_ROW

static_assert(sizeof(kCompareOps) / sizeof(kCompareOps[0]) == mt::kNumCompareOps);

// The backends with values to compare: the CPU always, CUDA where a device is present (the
// reason is printed once where it is not).
std::vector<Device> backends_present() {
  std::vector<Device> devices{Device::cpu()};
  if (mt::cuda::is_available()) {
    devices.push_back(Device::cuda(0));
  } else {
    static bool said = false;
    if (!said) std::cout << "[   NOTE   ] CUDA column not run: " << mt::testing::no_cuda_reason() << "\n";
    said = true;
  }
  return devices;
}

// Uniform values in [lo, hi) kept at least 0.01 away from 0, where relu's and abs' derivatives
// jump (central differences across the kink would be wrong, not the kernel).
Tensor sample(const mt::Shape& shape, double lo, double hi, uint64_t seed, DType dt, Device device) {
  std::vector<double> v = to_doubles(mt::testing::random_tensor(shape, mt::kFloat64, seed, lo, hi));
  for (double& x : v)
    if (std::abs(x) < 0.01) x = x < 0 ? -0.01 : 0.01;
  return mt::from_vector(v, shape).to(dt).to(device);
}

// Integers in [-2, 2] in dtype dt.
Tensor small_integers(const mt::Shape& shape, uint64_t seed, DType dt, Device device) {
  std::vector<double> v = to_doubles(mt::testing::random_tensor(shape, mt::kFloat64, seed, -2.5, 2.5));
  for (double& x : v) x = std::floor(x + 0.5);
  return mt::from_vector(v, shape).to(dt).to(device);
}

Tensor poisoned_like(const Tensor& t, DType dt) {
  Tensor out = mt::empty(t.shape(), mt::TensorOptions().dtype(dt).device(t.device()));
  mt::testing::poison(out);
  return out;
}

std::string where_(const char* name, Device device, DType dt) {
  return std::string(name) + " on " + device.str() + " in " + mt::dtype_name(dt);
}

}  // namespace

TEST(UnaryTable, KernelsMatchTheFp64ReferenceForwardAndBackward) {
  for (const UnaryEntry& e : kUnaryOps) {
    const auto ref = mt::testing::unary_reference(e.op);
    if (!ref) {
      ADD_FAILURE() << "unary op '" << e.name << "' has no reference row in tests/ops/elementwise_reference.h";
      continue;
    }
    for (Device device : backends_present()) {
      for (DType dt : float_types()) {
        SCOPED_TRACE(where_(e.name, device, dt));
        const Tensor x = sample({7, 33}, ref->lo, ref->hi, 11, dt, device);
        const std::vector<double> xs = to_doubles(x);
        Tensor y = poisoned_like(x, dt);
        mt::backends::unary(x, e.op, x, y, {ref->alpha, ref->beta});
        std::vector<double> y_ref, gx_ref;
        for (double v : xs) y_ref.push_back(ref->f(v, ref->alpha, ref->beta));
        EXPECT_TRUE(all_close(y, y_ref, tolerance_for(dt))) << "forward";

        // The backward reads only what the list says, as the ops layer saves only that; its y is
        // the forward's rounded output, as in training.
        const Tensor g = sample({7, 33}, -1, 1, 12, dt, device);
        const std::vector<double> gs = to_doubles(g);
        Tensor gx = poisoned_like(x, dt);
        mt::backends::unary_backward(g, e.op, e.reads_x ? x : Tensor(), e.reads_y ? y : Tensor(), g, gx,
                                     {ref->alpha, ref->beta});
        for (size_t i = 0; i < xs.size(); ++i) {
          const double h = 1e-6 * std::max(1.0, std::abs(xs[i]));
          gx_ref.push_back(gs[i] * (ref->f(xs[i] + h, ref->alpha, ref->beta) - ref->f(xs[i] - h, ref->alpha, ref->beta)) /
                          (2 * h));
        }
        const mt::testing::Tolerance tol =
            dt == mt::kFloat64 ? mt::testing::Tolerance{1e-8, 1e-6, 1e-8} : tolerance_for(dt);  // the reference's own limit
        EXPECT_TRUE(all_close(gx, gx_ref, tol)) << "backward";
      }
    }
  }
}

TEST(UnaryTable, PublicFunctionsKeepTheDtypeAndDifferentiate) {
  for (const UnaryEntry& e : kUnaryOps) {
    const auto ref = mt::testing::unary_reference(e.op);
    if (!ref) continue;  // reported by the kernel test
    SCOPED_TRACE(e.name);
    for (DType dt : float_types())
      EXPECT_EQ(e.call(sample({3}, ref->lo, ref->hi, 4, dt, Device::cpu()), ref->alpha, ref->beta).dtype(), dt);
    const Tensor x = sample({3, 4}, ref->lo, ref->hi, 5, mt::kFloat64, Device::cpu());
    const double alpha = ref->alpha, beta = ref->beta;
    EXPECT_TRUE(mt::testing::gradcheck([&](const std::vector<Tensor>& in) { return e.call(in[0], alpha, beta); }, {x}));
  }
}

TEST(BinaryTable, KernelsMatchTheFp64ReferenceWithBroadcastAndScalarOperands) {
  for (const BinaryEntry& e : kBinaryOps) {
    const auto ref = mt::testing::binary_reference(e.op);
    if (!ref) {
      ADD_FAILURE() << "binary op '" << e.name << "' has no reference row in tests/ops/elementwise_reference.h";
      continue;
    }
    for (Device device : backends_present()) {
      for (DType dt : float_types()) {
        SCOPED_TRACE(where_(e.name, device, dt));
        const Tensor a = sample({5, 33}, ref->lo, ref->hi, 21, dt, device);
        const Tensor b_row = sample({1, 33}, ref->lo, ref->hi, 22, dt, device);
        const std::vector<double> as = to_doubles(a), bs = to_doubles(b_row);
        std::vector<double> expected;
        for (size_t i = 0; i < as.size(); ++i) expected.push_back(ref->f(as[i], bs[i % 33]));
        Tensor out = poisoned_like(a, dt);
        mt::backends::binary(a, e.op, a, b_row.expand({5, 33}), out);  // a stride-0 operand, as broadcasting gives
        EXPECT_TRUE(all_close(out, expected, tolerance_for(dt))) << "tensor op tensor";

        const double s = 0.75;  // inside every row's range
        const double s_stored = to_doubles(mt::full({1}, s, mt::TensorOptions().dtype(dt)))[0];
        std::vector<double> after, before;
        for (double v : as) {
          after.push_back(ref->f(v, s_stored));
          before.push_back(ref->f(s_stored, v));
        }
        Tensor out_after = poisoned_like(a, dt), out_before = poisoned_like(a, dt);
        mt::backends::binary_scalar(a, e.op, a, s, false, out_after);
        mt::backends::binary_scalar(a, e.op, a, s, true, out_before);
        EXPECT_TRUE(all_close(out_after, after, tolerance_for(dt))) << "tensor op scalar";
        EXPECT_TRUE(all_close(out_before, before, tolerance_for(dt))) << "scalar op tensor";
      }
    }
  }
}

TEST(BinaryTable, PublicFunctionsDifferentiateThroughBroadcasting) {
  for (const BinaryEntry& e : kBinaryOps) {
    const auto ref = mt::testing::binary_reference(e.op);
    if (!ref) continue;  // reported by the kernel test
    SCOPED_TRACE(e.name);
    const Tensor a = sample({3, 4}, ref->lo, ref->hi, 31, mt::kFloat64, Device::cpu());
    // Offset so maximum/minimum never see a tie, where their derivative is not defined.
    const Tensor b = mt::add(sample({1, 4}, ref->lo, ref->hi, 32, mt::kFloat64, Device::cpu()), 0.003);
    EXPECT_TRUE(mt::testing::gradcheck([&](const std::vector<Tensor>& in) { return e.call(in[0], in[1]); }, {a, b}));
  }
}

TEST(CompareTable, KernelsAndPublicFunctionsMatchTheReferenceOnTiesToo) {
  std::vector<DType> dtypes = float_types();
  dtypes.push_back(mt::kInt64);
  dtypes.push_back(mt::kInt32);
  for (const CompareEntry& e : kCompareOps) {
    const auto ref = mt::testing::compare_reference(e.op);
    if (!ref) {
      ADD_FAILURE() << "comparison '" << e.name << "' has no reference row in tests/ops/elementwise_reference.h";
      continue;
    }
    for (Device device : backends_present()) {
      for (DType dt : dtypes) {
        SCOPED_TRACE(where_(e.name, device, dt));
        // Small integers, so about a fifth of the pairs are ties.
        const Tensor a = small_integers({4, 25}, 41, dt, device);
        const Tensor b = small_integers({4, 25}, 42, dt, device);
        const std::vector<double> as = to_doubles(a), bs = to_doubles(b);
        std::vector<double> expected;
        for (size_t i = 0; i < as.size(); ++i) expected.push_back(ref.value()(as[i], bs[i]) ? 1.0 : 0.0);
        Tensor out = poisoned_like(a, mt::kBool);
        mt::backends::compare(a, e.op, a, b, out);
        EXPECT_EQ(to_doubles(out), expected) << "kernel";
        EXPECT_EQ(to_doubles(e.call(a, b)), expected) << "public function";
      }
    }
  }
}
