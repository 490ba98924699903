#pragma once
// Shared test helpers: random inputs, poisoned outputs, tolerance checks against fp64
// references (../shared/docs/TESTING.md) and the fp64 finite-difference gradient checker.
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mixtrain/mixtrain.h"

namespace mixtrain::testing {

struct Tolerance {
  double norm_rtol;  // ||out - ref|| / ||ref||
  double rtol;       // per element: |out - ref| <= atol + rtol * |ref|
  double atol;
};

// TESTING.md's default tolerances for the dtype an op computes in.
Tolerance tolerance_for(DType dtype);

// Uniform values in [lo, hi) of the given dtype, from a fixed seed (tests are reproducible).
Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double lo = -1.0, double hi = 1.0);

// Fills t with NaN (floating) or a sentinel (integers), so an unwritten element fails.
void poison(Tensor& t);

// Compares out with an fp64 reference: relative norm error and worst element; prints the first
// few differing indices with both values. NaN never passes.
::testing::AssertionResult all_close(const Tensor& out, const Tensor& ref, const Tolerance& tol);
::testing::AssertionResult all_close(const Tensor& out, const std::vector<double>& ref, const Tolerance& tol);

// Checks the autograd gradients of `fn` (fp64 inputs) against central finite differences.
// fn's output is reduced with fixed random weights so every output element matters.
::testing::AssertionResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                                     std::vector<Tensor> inputs, double eps = 1e-6, double rtol = 1e-5,
                                     double atol = 1e-7);

std::vector<double> to_doubles(const Tensor& t);

// The message of the mixtrain::Error that f throws, or "<no error>".
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace mixtrain::testing
