// The CPU kernel trace (verbose.h).
#include "backends/cpu/verbose.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "backends/cpu/threads.h"
#include "mixtrain/base/error.h"

namespace mixtrain::backends::cpu {

bool parse_cpu_verbose(const char* value) {
  if (value == nullptr || std::strcmp(value, "0") == 0) return false;
  MT_CHECK(std::strcmp(value, "1") == 0,
           "MIXTRAIN_CPU_VERBOSE must be 0 or 1 (a line per GEMM and convolution naming the kernel), got '", value,
           "'");
  return true;
}

bool cpu_verbose() {
  static const bool on = parse_cpu_verbose(std::getenv("MIXTRAIN_CPU_VERBOSE"));
  return on;
}

std::string operand_str(const Tensor& t, bool transposed) {
  std::ostringstream s;
  s << "[";
  for (int64_t d = 0; d < t.dim(); ++d) s << (d ? ", " : "") << t.size(d);
  s << "]" << (transposed ? "^T " : " ") << dtype_name(t.dtype());
  return s.str();
}

std::string gemm_operands(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& bias,
                          GemmEpilogue epilogue) {
  return operand_str(a, trans_a) + " x " + operand_str(b, trans_b) + (bias.defined() ? " + bias" : "") +
         (epilogue == GemmEpilogue::Relu ? ", relu" : "");
}

std::string conv_operands(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& bias, const Conv2dParams& p) {
  std::ostringstream s;
  s << "x " << operand_str(x) << ", w " << operand_str(w) << ", y " << operand_str(y) << (bias.defined() ? " + bias" : "")
    << ", stride " << p.stride_h << "x" << p.stride_w << " pad " << p.pad_h << "x" << p.pad_w << " dilation "
    << p.dilation_h << "x" << p.dilation_w << " groups " << p.groups;
  if (y.dim() == 4 && y.is_contiguous(MemoryFormat::ChannelsLast) && !y.is_contiguous()) s << ", channels-last";
  return s.str();
}

CallTrace::CallTrace(const char* kernel) : kernel_(kernel), start_ns_(cpu_verbose() ? now_ns() : 0) {}

void CallTrace::print(const std::string& impl, const std::string& operands) const {
  const double ms = static_cast<double>(now_ns() - start_ns_) * 1e-6;
  // One write per line, so lines of concurrent calls do not interleave.
  std::fprintf(stderr, "mixtrain cpu: %s %s -> %s %.3f ms\n", kernel_, operands.c_str(), impl.c_str(), ms);
}

}  // namespace mixtrain::backends::cpu
