#pragma once
// The sample inputs of the elementwise ops, one registry for every walk over op_list.h
// (tests/autograd/test_saved_tensors.cpp, tests/ops/test_meta_ops.cpp,
// tests/amp/test_autocast_dtypes.cpp) and for the table test (test_elementwise_table.cpp), as
// PyTorch's OpInfo sample inputs serve its suites. All of it is generated from the op lists
// (mixtrain/base/elementwise_ops.h) and their reference rows (elementwise_reference.h): each
// entry's public function, its inputs from the reference's domain, its scalars from the
// reference row, what its backward reads from the list's columns. An op added to the lists, with
// scalars or without, is walked everywhere with no edit to a walk. Other ops may take their
// samples from a row of other_samples() below instead of a case in each walk (amax does).
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "mixtrain/mixtrain.h"
#include "ops/elementwise_reference.h"
#include "support/testing.h"

namespace mixtrain::testing {

// The public function of each unary entry, called with the entry's scalars (ignored by `plain`).
struct UnaryEntry {
  backends::UnaryOp op;
  const char* name;
  Tensor (*call)(const Tensor& x, double alpha, double beta);
  bool reads_x, reads_y;
};
#define MT_PUBLIC_plain(name) [](const Tensor& x, double, double) { return mixtrain::name(x); }
#define MT_PUBLIC_alpha(name) [](const Tensor& x, double a, double) { return mixtrain::name(x, a); }
#define MT_PUBLIC_scalars(name) [](const Tensor& x, double a, double b) { return mixtrain::name(x, a, b); }
#define MT_UNARY_ENTRY(code, name, reads_x, reads_y, kind) \
  UnaryEntry{backends::UnaryOp::code, #name, MT_PUBLIC_##kind(name), reads_x, reads_y},
inline const std::vector<UnaryEntry> kUnaryEntries = {MT_UNARY_OPS(MT_UNARY_ENTRY)};
#undef MT_UNARY_ENTRY
#undef MT_PUBLIC_plain
#undef MT_PUBLIC_alpha
#undef MT_PUBLIC_scalars

struct BinaryEntry {
  backends::BinaryOp op;
  const char* name;
  Tensor (*call)(const Tensor& a, const Tensor& b);
  bool reads_a, reads_b, reads_out;
};
#define MT_BINARY_ENTRY(code, name, reads_a, reads_b, reads_out)                                              \
  BinaryEntry{backends::BinaryOp::code, #name, [](const Tensor& a, const Tensor& b) { return mixtrain::name(a, b); }, \
              reads_a, reads_b, reads_out},
inline const std::vector<BinaryEntry> kBinaryEntries = {MT_BINARY_OPS(MT_BINARY_ENTRY)};
#undef MT_BINARY_ENTRY

// One call of an op of op_list.h on floating inputs.
struct OpSample {
  std::string op;              // its name in op_list.h
  std::vector<Shape> shapes;   // one floating input each, uniform in [lo, hi)
  double lo, hi;
  std::function<Tensor(const std::vector<Tensor>&)> run;  // the public function, with the scalars
  std::set<std::string> reads;  // what backward reads: "in0", "in1", "out0" (test_saved_tensors' names)

  // The inputs in dtype dt, the same values on every call; leaves that require grad when asked.
  std::vector<Tensor> inputs(DType dt, bool requires_grad) const {
    std::vector<Tensor> in;
    for (size_t k = 0; k < shapes.size(); ++k) {
      Tensor t = random_tensor(shapes[k], kFloat64, 1 + k, lo, hi).to(dt);
      in.push_back(requires_grad ? t.set_requires_grad(true) : t);
    }
    return in;
  }
};

// Every list entry with a reference row (one without is reported by test_elementwise_table.cpp).
// pow has two: pow(a, b) and pow(x, exponent).
inline std::vector<OpSample> elementwise_samples() {
  std::vector<OpSample> samples;
  for (const UnaryEntry& e : kUnaryEntries) {
    const auto ref = unary_reference(e.op);
    if (!ref) continue;
    auto call = [f = e.call, a = ref->alpha, b = ref->beta](const std::vector<Tensor>& in) { return f(in.at(0), a, b); };
    OpSample s{e.name, {{3, 4}}, ref->lo, ref->hi, call, {}};
    if (e.reads_x) s.reads.insert("in0");
    if (e.reads_y) s.reads.insert("out0");
    samples.push_back(s);
  }
  for (const BinaryEntry& e : kBinaryEntries) {
    const auto ref = binary_reference(e.op);
    if (!ref) continue;
    auto call = [f = e.call](const std::vector<Tensor>& in) { return f(in.at(0), in.at(1)); };
    OpSample s{e.name, {{3, 4}, {4}}, ref->lo, ref->hi, call, {}};  // b broadcasts: its gradient reduces
    if (e.reads_a) s.reads.insert("in0");
    if (e.reads_b) s.reads.insert("in1");
    if (e.reads_out) s.reads.insert("out0");
    samples.push_back(s);
  }
  return samples;
}

// One row per call: the op's name, its input shapes and domain, the call, what backward reads.
inline std::vector<OpSample> other_samples() {
  using In = const std::vector<Tensor>&;
  return {
      {"amax", {{3, 4}}, -2, 2, [](In in) { return mixtrain::amax(in.at(0), {1}); }, {"in0", "out0"}},
      {"amax", {{2, 3, 4}}, -2, 2, [](In in) { return mixtrain::amax(in.at(0), {0, 2}, true); }, {"in0", "out0"}},
  };
}

inline std::vector<OpSample> all_samples() {
  std::vector<OpSample> all = elementwise_samples();
  for (const OpSample& s : other_samples()) all.push_back(s);
  return all;
}

// The samples of one op (none: the walk needs its own case).
inline std::vector<OpSample> samples_of(const std::string& op) {
  std::vector<OpSample> found;
  for (const OpSample& s : all_samples())
    if (s.op == op) found.push_back(s);
  return found;
}

}  // namespace mixtrain::testing
