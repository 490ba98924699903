#pragma once
// The plain-data vocabulary shared by the kernel declarations (backends/<family>.h) and the CUDA kernels
// (kernels/*.cu): op codes and parameter structs, with no Tensor in sight, so nvcc compiles the
// kernels without the tensor headers.
#include <cstdint>

#include "mixtrain/base/elementwise_ops.h"

namespace mixtrain::backends {

// The op lists are X-macros in mixtrain/base/elementwise_ops.h; everything per op is generated.
#define MT_ENUM_ENTRY(name, ...) name,
enum class UnaryOp : uint8_t { MT_UNARY_OPS(MT_ENUM_ENTRY) };
enum class BinaryOp : uint8_t { MT_BINARY_OPS(MT_ENUM_ENTRY) };
enum class CompareOp : uint8_t { MT_COMPARE_OPS(MT_ENUM_ENTRY) };
#undef MT_ENUM_ENTRY

// What a unary op's backward formula reads: the forward's input, its output, or neither.
constexpr bool unary_backward_reads_input(UnaryOp op) {
  constexpr bool table[] = {
#define MT_READS_X(code, name, reads_x, reads_y, kind) reads_x,
      MT_UNARY_OPS(MT_READS_X)
#undef MT_READS_X
  };
  return table[static_cast<int>(op)];
}
constexpr bool unary_backward_reads_output(UnaryOp op) {
  constexpr bool table[] = {
#define MT_READS_Y(code, name, reads_x, reads_y, kind) reads_y,
      MT_UNARY_OPS(MT_READS_Y)
#undef MT_READS_Y
  };
  return table[static_cast<int>(op)];
}

// The scalars of a unary op, in the order of its public function: pow's exponent or a clamp bound
// in alpha; a `scalars` op's two (softplus: beta, threshold) in alpha and beta. Built from a
// double, so a one-scalar call passes its scalar as it did before the second one existed.
struct UnaryScalars {
  double alpha = 0.0, beta = 0.0;
  UnaryScalars(double a = 0.0, double b = 0.0) : alpha(a), beta(b) {}  // NOLINT: implicit from a double on purpose
};

enum class ReduceOp : uint8_t { Sum, Max, Min };

// What backends::gemm applies to out after the bias, in the same pass. Only ReLU: GELU would need
// the pre-activation saved for its backward (so no pass saved), and cuBLASLt's GELU epilogue is
// the tanh approximation, not our exact erf form.
enum class GemmEpilogue : uint8_t { None, Relu };

const char* unary_op_name(UnaryOp op);
const char* binary_op_name(BinaryOp op);

// The loss scaler's scale update (amp::GradScaler::update), as data so a device kernel can run
// it without a host round trip. Rule (PyTorch's, plus the opt-in extensions):
//   overflow: growth_tracker = 0; hysteresis_tracker = max(hysteresis_tracker - 1, 0); when it
//             reaches 0: at_min_scale = (min_scale > 0 && scale <= min_scale), and
//             scale = max(float(scale * backoff_factor), min_scale)
//   clean:    hysteresis_tracker = hysteresis; growth_tracker += 1; when it reaches
//             growth_interval: growth_tracker = 0 and scale = min(float(scale * growth_factor),
//             max_scale) if that is finite, else unchanged.
struct ScaleUpdateArgs {
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  int64_t hysteresis = 1;  // 1: back off on every overflow (PyTorch)
  double min_scale = 1.1754943508222875e-38;  // 2^-126 (amp::kScaleFloor); 0: no floor
  double max_scale = 0.0;  // 0: no ceiling
};

// Element counts the check+unscale pass can gather in the same sweep, accumulated (max / add)
// into an fp64 tensor of kAmpStatsSize elements, so several calls (dtypes, optimizers) combine.
enum AmpStat : int { kAmpStatMaxAbs = 0, kAmpStatZeros = 1, kAmpStatFp16Subnormal = 2, kAmpStatElements = 3 };
constexpr int64_t kAmpStatsSize = 4;

// How backends::fp8_update_scale turns amaxes into scales (FP8 recipes, amp/fp8.h): per slot j
// (one cast tensor), amax = the max over the history's rows (max_over_history) or its row 0,
// clamped to >= 1e-12; scale = (fp8_max[j] / amax) / 2^margin in fp32, scale_inv = 1 / scale. With
// keep_scale_on_zero (delayed scaling, TransformerEngine's rule) a slot whose amax is 0 or not
// finite keeps its scale; otherwise (current scaling) a zero amax takes the clamp and a non-finite
// one gives scale 1. With roll the history then moves down a row (the last is dropped) and row
// 0 is zeroed for the next step.
struct Fp8ScaleArgs {
  static constexpr int kMaxSlots = 4;
  float fp8_max[kMaxSlots] = {448.0f, 448.0f, 448.0f, 448.0f};
  int margin = 0;
  bool max_over_history = true;
  bool keep_scale_on_zero = true;
  bool roll = true;
};

struct NllLossArgs {
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
};

// Convolution geometry; the sizes come from the tensors (x [N, C, H, W], w [Cout, C/groups, kh, kw]).
struct Conv2dParams {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
};

// Pooling window; padding is implicit -inf.
struct Pool2dParams {
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
};

enum class UpsampleMode : uint8_t { Nearest, Bilinear };

// Source coordinate of output pixel i: nearest: floor(i * scale); bilinear: i * scale when
// align_corners, else (i + 0.5) * scale - 0.5 clamped at 0. The ops layer works out `scale`
// (PyTorch's rules for size / scale_factor / align_corners), so every backend agrees on it.
struct Upsample2dParams {
  UpsampleMode mode = UpsampleMode::Nearest;
  bool align_corners = false;
  double scale_h = 1.0, scale_w = 1.0;
};

constexpr int64_t kNoPaddingIdx = INT64_MIN;

// The optimizers' fused updates (optim::Adam/AdamW/SGD), as data so every backend runs the same
// update. Scalars are doubles here; kernels cast them to the compute type once.
struct AdamArgs {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled = false;  // AdamW: w *= 1 - lr * weight_decay; Adam: g += weight_decay * w
  bool amsgrad = false;
  int64_t step = 1;  // the step being taken, counted from 1
};

struct SgdArgs {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool first_step = false;  // momentum buffer just created: buf = g (PyTorch's first-step init)
  int64_t step = 1;         // the step being taken, counted from 1; step 1 also initialises buf = g
};

// What backends::random fills a tensor with. Element i of a fill that starts at generator offset
// `offset` uses draw offset + i (uniform) or draws offset + 2i and offset + 2i + 1 (normal,
// Box-Muller), so every backend produces the same values as Generator::next_uniform/next_normal.
enum class RandomKind : uint8_t { Uniform, Normal };

}  // namespace mixtrain::backends
