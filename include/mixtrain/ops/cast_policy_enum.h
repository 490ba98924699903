#pragma once
// The CastPolicy values (how autocast treats an op's floating inputs) and their names. The ops
// layer owns each op's policy as data (op_list.h); the amp layer's policy table
// (amp/cast_policy.h) reads and overrides it and decides what to do with it.
#include <string>

namespace mixtrain::amp {

enum class CastPolicy : unsigned char {
  LowerPrecision,    // cast eligible inputs to the autocast dtype (fp16/bf16): matmul, linear, conv
  Float32,           // cast eligible inputs to fp32: exp, log, norms, losses
  Float32OptDtype,   // reductions with a dtype argument: set dtype=fp32 unless the caller gave one
  Promote,           // cast eligible inputs to the widest floating type among them
  Banned,            // raise: unsafe under autocast (binary_cross_entropy)
  Passthrough,       // run in the input dtypes (ordinary type promotion)
};

const char* cast_policy_name(CastPolicy p);        // "lower_precision", "fp32", "fp32_set_opt_dtype", ...
bool cast_policy_from_name(const std::string& name, CastPolicy* out);

}  // namespace mixtrain::amp
