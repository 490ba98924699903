#pragma once
// Shared test helpers: random inputs, poisoned outputs, tolerance checks against fp64
// references (docs/TESTING.md), the fp64 finite-difference gradient checker, and
// checks of the errors an operation raises.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
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

// t's elements as raw bytes in row-major order (a non-contiguous view is made contiguous first):
// for bit-exact comparisons.
std::vector<uint8_t> bytes_of(const Tensor& t);

// The names of named tensors (a state_dict, named_parameters()), in their order.
std::vector<std::string> names_of(const std::map<std::string, Tensor>& named);
std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& named);

// The floating dtypes an op is tested in: float32, float64, float16, bfloat16.
const std::vector<DType>& float_types();

// What error_of returns when f throws nothing.
// Makes `slot` `depth` arrays nested in one another, built in place: copying such a value (an
// initializer list, an assignment from an lvalue) recurses once per level and overflows the stack
// of a sanitizer build, so a test hands the library a deep value without ever copying it.
inline void nest_arrays_into(nlohmann::json& slot, int depth) {
  slot = nlohmann::json::array();
  nlohmann::json* p = &slot;
  for (int i = 1; i < depth; ++i) {
    p->push_back(nlohmann::json::array());
    p = &p->back();
  }
}

inline constexpr char kNoError[] = "<no error>";

// The message of the mixtrain::Error that f throws, or kNoError.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return kNoError;
}

// Success when `message` (from error_of) is that of an error and contains every one of `parts`;
// the failure names the parts it lacks and quotes the whole message.
::testing::AssertionResult error_contains(const std::string& message, const std::vector<std::string>& parts);

// Expects f to throw a mixtrain::Error whose message contains `needle` (or every one of `parts`).
// Throwing nothing fails; a message that lacks a part fails and is printed in full. Any other
// exception propagates (gtest reports it).
template <class F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  EXPECT_TRUE(error_contains(error_of(std::forward<F>(f)), parts));
}
template <class F>
void expect_error(F&& f, std::initializer_list<std::string> parts) {
  expect_error(std::forward<F>(f), std::vector<std::string>(parts));
}
template <class F>
void expect_error(F&& f, const std::string& needle) {
  expect_error(std::forward<F>(f), std::vector<std::string>{needle});
}

// A fresh directory under the system's temp directory (mkdtemp), removed with its contents when
// the object goes.
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& prefix = "mt_test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path + "/" + name; }
};

}  // namespace mixtrain::testing
