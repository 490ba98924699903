#pragma once
// Shared by the CUDA backend tests: a fixture that skips (with the reason printed) where no GPU
// is present, and a harness that runs one kernel on the CPU backend and on the CUDA backend with
// the same inputs, the outputs poisoned first, and compares every output.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "backends/all_kernels.h"
#include "mixtrain/config.h"
#include "support/testing.h"

namespace mixtrain::testing {

inline std::string no_cuda_reason() {
#ifdef MIXTRAIN_WITH_CUDA
  return "no CUDA device on this machine (the CUDA backend is compiled in; these tests run on a GPU)";
#else
  return "mixtrain was built without CUDA (-DMIXTRAIN_CUDA=OFF)";
#endif
}

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << no_cuda_reason();
  }
  static DeviceType cpu() { return DeviceType::CPU; }
  static DeviceType gpu() { return DeviceType::CUDA; }
};

inline Device gpu_device() { return Device::cuda(0); }

// A tensor seen as [outer, n, inner] around the axis a reduction, softmax or loss runs along.
struct View3 {
  int64_t outer, n, inner;
};

// Two summation orders of a k-term fp32 dot product of values in [-1, 1] differ by up to about
// k ulps of the terms' scale, not of the result: a result near zero by cancellation keeps that
// absolute error. So fp32 gets an absolute tolerance of 3e-7 * k (below the classical bound
// k * eps * sum |a_i b_i|), and the norm check stays at TESTING.md's 1e-5.
inline Tolerance gemm_tolerance(DType dt, int64_t k) {
  Tolerance t = tolerance_for(dt);
  if (dt == kFloat32) t.atol = 3e-7 * static_cast<double>(k);
  return t;
}

inline Tensor on(const Tensor& t, Device d) {
  if (!t.defined()) return t;
  NoGradGuard no_grad;
  return t.to(d);
}

// An output tensor filled with NaN (or a sentinel for integers) on device d.
inline Tensor poisoned_on(const Shape& shape, DType dtype, Device d) {
  Tensor t = empty(shape, TensorOptions(dtype).device(d));
  poison(t);
  return t;
}

// Bit-for-bit agreement as values: equal, or both NaN (inf equals inf).
inline ::testing::AssertionResult all_equal(const Tensor& got_t, const std::vector<double>& want) {
  const std::vector<double> got = to_doubles(got_t);
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    const bool same = got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i]));
    if (!same) return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", expected " << want[i];
  }
  return ::testing::AssertionSuccess();
}

// Exact comparison (integers, bools, conversions that must round identically).
inline Tolerance exact() { return {0, 0, 0}; }
inline bool is_exact(const Tolerance& t) { return t.norm_rtol == 0 && t.rtol == 0 && t.atol == 0; }

struct OutputSpec {
  Shape shape;
  DType dtype;
  std::string name;
  Tolerance tol;
};

// Runs one kernel call on the given device type (e.g. backends::unary(device, ...)).
using KernelCall = std::function<void(DeviceType&, const std::vector<Tensor>& in, const std::vector<Tensor>& out)>;

// Runs call on the CPU backend (inputs as given) and on the CUDA backend (inputs copied to the
// GPU), into poisoned outputs, and compares each CUDA output with the CPU one.
inline void compare_backends(const std::string& what, const std::vector<Tensor>& inputs,
                             const std::vector<OutputSpec>& outputs, const KernelCall& call) {
  SCOPED_TRACE(what);
  std::vector<Tensor> in_gpu, out_cpu, out_gpu;
  for (const Tensor& t : inputs) in_gpu.push_back(on(t, gpu_device()));
  for (const OutputSpec& o : outputs) {
    out_cpu.push_back(poisoned_on(o.shape, o.dtype, Device::cpu()));
    out_gpu.push_back(poisoned_on(o.shape, o.dtype, gpu_device()));
  }
  DeviceType on_cpu = DeviceType::CPU, on_gpu = DeviceType::CUDA;
  call(on_cpu, inputs, out_cpu);
  call(on_gpu, in_gpu, out_gpu);
  for (size_t i = 0; i < outputs.size(); ++i) {
    EXPECT_EQ(out_gpu[i].device(), gpu_device());
    const std::vector<double> want = to_doubles(out_cpu[i]);
    if (is_exact(outputs[i].tol)) EXPECT_TRUE(all_equal(out_gpu[i], want)) << outputs[i].name;
    else EXPECT_TRUE(all_close(out_gpu[i], want, outputs[i].tol)) << outputs[i].name;
  }
}

}  // namespace mixtrain::testing
