#pragma once
// MIXTRAIN_CPU_VERBOSE=1: one line on stderr per GEMM and convolution call naming the library and
// kernel that ran it (onednn:brg:avx512_core_bf16, own:avx512bf16, eigen:avx512, ...), its
// operands and its time (docs/CPU.md, "oneDNN: which op runs where and how to turn it off").
#include <cstdint>
#include <string>

#include "backends/kernel_types.h"
#include "mixtrain/core/tensor.h"

namespace mixtrain::backends::cpu {

// MIXTRAIN_CPU_VERBOSE's value, read once: unset or 0 off, 1 on (anything else is an Error).
bool cpu_verbose();
bool parse_cpu_verbose(const char* value);

// "[512, 215] bf16", with "^T" when the kernel reads it transposed.
std::string operand_str(const Tensor& t, bool transposed = false);
// A GEMM's or convolution's operands for the trace and for errors.
std::string gemm_operands(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& bias,
                          GemmEpilogue epilogue);
std::string conv_operands(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& bias, const Conv2dParams& p);

// Times one kernel call when the trace is on; done() prints its line.
class CallTrace {
 public:
  explicit CallTrace(const char* kernel);
  bool on() const { return start_ns_ != 0; }
  // "mixtrain cpu: gemm <operands> -> <impl> <ms> ms"; `operands` is built only when on().
  template <class Describe>
  void done(const std::string& impl, Describe&& operands) const {
    if (on()) print(impl, operands());
  }

 private:
  void print(const std::string& impl, const std::string& operands) const;
  const char* kernel_;
  int64_t start_ns_ = 0;
};

}  // namespace mixtrain::backends::cpu
