#pragma once
// The elementwise op lists, one X-macro each, as plain data with no includes: the single source
// of the backends' op codes (UnaryOp, BinaryOp, CompareOp), their names, the compile-time
// switches, what a unary backward reads, and the public functions mixtrain::fn / Tensor::fn of
// the plain unary ops. docs/ADDING_AN_OP.md walks through adding an entry.
//
// Unary columns: code, function name (also the op id in ops/op_list.h, which holds the autocast
// policy), whether the backward formula reads the forward's input x, whether it reads the output
// y (the ops layer saves only what it reads), and the signature: `plain` ops are fn(x) and their
// public functions are generated; `alpha` ops take a scalar (fn(x, double)) and are written out;
// `scalars` ops take the two scalars their MT_UNARY_SCALARS row names, with its defaults, and their
// public functions are generated from that row.
#define MT_UNARY_OPS(X)                     \
  X(Neg, neg, false, false, plain)          \
  X(Exp, exp, false, true, plain)           \
  X(Log, log, true, false, plain)           \
  X(Sqrt, sqrt, false, true, plain)         \
  X(Rsqrt, rsqrt, false, true, plain)       \
  X(Tanh, tanh, false, true, plain)         \
  X(Sigmoid, sigmoid, false, true, plain)   \
  X(Relu, relu, true, false, plain)         \
  X(Gelu, gelu, true, false, plain)         \
  X(Silu, silu, true, false, plain)         \
  X(Abs, abs, true, false, plain)           \
  X(Pow, pow, true, false, alpha)           \
  X(Square, square, true, false, plain)     \
  X(ClampMin, clamp_min, true, false, alpha) \
  X(ClampMax, clamp_max, true, false, alpha) \
  X(Softplus, softplus, true, false, scalars)

// The scalars of the `scalars` ops, with PyTorch's names and defaults: code, name, then the first
// and the second scalar's name and default. The kernels get them as UnaryScalars{first, second}.
// (A `scalars` op without a row here has no public function, so its walks do not compile.)
#define MT_UNARY_SCALARS(X) X(Softplus, softplus, beta, 1.0, threshold, 20.0)

// Binary columns: code, name, and whether the backward reads the first input a, the second b and
// the output (what tests/autograd/test_saved_tensors.cpp expects the gradient in
// src/ops/elementwise.cpp to save when both inputs require grad). Their public functions fn(a, b)
// are generated. Comparison columns: code, name.
#define MT_BINARY_OPS(X)                   \
  X(Add, add, false, false, false)         \
  X(Sub, sub, false, false, false)         \
  X(Mul, mul, true, true, false)           \
  X(Div, div, true, true, false)           \
  X(Pow, pow, true, true, true)            \
  X(Maximum, maximum, true, true, false)   \
  X(Minimum, minimum, true, true, false)   \
  X(Hypot, hypot, true, true, true)
#define MT_COMPARE_OPS(X) X(Eq, eq) X(Ne, ne) X(Lt, lt) X(Le, le) X(Gt, gt) X(Ge, ge)

// The plain unary ops: define MT_PLAIN_UNARY(code, name), expand MT_FOR_PLAIN_UNARY_OPS, undefine it.
#define MT_FOR_PLAIN_UNARY_OPS MT_UNARY_OPS(MT_SELECT_PLAIN_UNARY)
#define MT_SELECT_PLAIN_UNARY(code, name, reads_x, reads_y, kind) MT_SELECT_PLAIN_UNARY_##kind(code, name)
#define MT_SELECT_PLAIN_UNARY_plain(code, name) MT_PLAIN_UNARY(code, name)
#define MT_SELECT_PLAIN_UNARY_alpha(code, name)
#define MT_SELECT_PLAIN_UNARY_scalars(code, name)

namespace mixtrain {
#define MT_COUNT_ENTRY(...) +1
constexpr int kNumUnaryOps = 0 MT_UNARY_OPS(MT_COUNT_ENTRY);
constexpr int kNumBinaryOps = 0 MT_BINARY_OPS(MT_COUNT_ENTRY);
constexpr int kNumCompareOps = 0 MT_COMPARE_OPS(MT_COUNT_ENTRY);
#undef MT_COUNT_ENTRY
// Every per-op table is generated from the lists, so a count only changes on purpose: bump it
// with the entry you add (it also guards the uint8_t op codes against overflow).
static_assert(kNumUnaryOps == 16 && kNumBinaryOps == 8 && kNumCompareOps == 6,
              "an elementwise op list changed: update this count, and the op's formula and reference row");
}  // namespace mixtrain
