// 2-D convolutions through cuDNN: forward, backward data (also conv_transpose2d's forward) and
// backward filter, NCHW or channels-last (NHWC, the layout of cuDNN's tensor-core kernels, which
// otherwise transpose NCHW operands around them), any stride / padding / dilation / groups. The
// layout of a call is its output's; the other operands are brought to it. fp16/bf16 run on tensor cores
// with fp32 accumulation; fp32 uses TF32 only when mixtrain::cuda::cudnn_allow_tf32() (on by
// default, as in PyTorch). Algorithms come from cuDNN's heuristics, or from timing them once per
// shape in benchmark mode (mixtrain::cuda::set_cudnn_benchmark), and are cached per shape.
//
// cuDNN 9 marks this descriptor API deprecated in favour of its graph API; it remains supported
// and is far shorter for these three fixed operations.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backends/conv.h"
#include "backends/copy.h"
#include "backends/elementwise.h"
#include "backends/cuda/context.h"
#include "backends/cuda/operands.h"
#include "backends/cuda/cuda_check.h"

namespace mixtrain::backends::cuda {

namespace {

const char* direction_name(ConvDirection d) {
  return d == ConvDirection::Forward         ? "forward"
         : d == ConvDirection::BackwardInput ? "backward-data"
                                             : "backward-filter";
}

struct Candidate {
  int algo;
  cudnnMathType_t math;
  size_t workspace;
};

// Per direction, the usable algorithms in cuDNN's order and the one in use: a candidate that
// fails when it runs (a heuristic can rank one that this shape, layout or alignment does not
// support) is dropped for the next, as PyTorch does.
struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnMathType_t wanted = CUDNN_DEFAULT_MATH;
  std::vector<Candidate> candidates[3];  // by ConvDirection; empty until the direction is first run
  size_t in_use[3] = {0, 0, 0};
};

// dtype, device, the shapes, the geometry, and the modes that change the algorithm choice.
using ConvKey = std::vector<int64_t>;

cudnnDataType_t cudnn_type(DType dt) {
  switch (dt) {
    case DType::Float32: return CUDNN_DATA_FLOAT;
    case DType::Float16: return CUDNN_DATA_HALF;
    case DType::BFloat16: return CUDNN_DATA_BFLOAT16;
    case DType::Float64: return CUDNN_DATA_DOUBLE;
    default: MT_ERROR("conv2d: not implemented on CUDA for dtype ", dt);
  }
}

cudnnMathType_t wanted_math(DType dt) {
  if (dt == DType::Float32) return mixtrain::cuda::cudnn_allow_tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  if (dt == DType::Float64) return CUDNN_DEFAULT_MATH;
  return CUDNN_TENSOR_OP_MATH;
}

int as_int(int64_t v, const char* what) {
  MT_CHECK(v >= 0 && v <= INT32_MAX, "conv2d: ", what, " ", v, " exceeds cuDNN's 32-bit limit");
  return static_cast<int>(v);
}

struct Geometry {
  DType dt;
  int64_t n, c, h, w, cout, kh, kw, ho, wo;
  Conv2dParams p;
  bool nhwc;
};

ConvPlan make_plan(const Geometry& g) {
  ConvPlan plan;
  const cudnnDataType_t type = cudnn_type(g.dt);
  MT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&plan.x));
  MT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&plan.y));
  MT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&plan.w));
  MT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&plan.conv));
  const cudnnTensorFormat_t format = g.nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  MT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan.x, format, type, as_int(g.n, "batch"), as_int(g.c, "channels"),
                                            as_int(g.h, "height"), as_int(g.w, "width")));
  MT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan.y, format, type, as_int(g.n, "batch"), as_int(g.cout, "channels"),
                                            as_int(g.ho, "height"), as_int(g.wo, "width")));
  MT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(plan.w, type, format, as_int(g.cout, "channels"),
                                            as_int(g.c / g.p.groups, "channels"), as_int(g.kh, "kernel"),
                                            as_int(g.kw, "kernel")));
  MT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
      plan.conv, as_int(g.p.pad_h, "padding"), as_int(g.p.pad_w, "padding"), as_int(g.p.stride_h, "stride"),
      as_int(g.p.stride_w, "stride"), as_int(g.p.dilation_h, "dilation"), as_int(g.p.dilation_w, "dilation"),
      CUDNN_CROSS_CORRELATION, g.dt == DType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT));
  MT_CUDNN_CHECK(cudnnSetConvolutionGroupCount(plan.conv, as_int(g.p.groups, "groups")));
  plan.wanted = wanted_math(g.dt);
  MT_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv, plan.wanted));
  return plan;
}

// The usable algorithms of a ranked list (heuristic or timed), best first.
template <class Perf>
void take_ranked(const Perf* perf, int count, ConvDirection d, ConvPlan& plan) {
  const int dir = static_cast<int>(d);
  for (int i = 0; i < count; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS)
      plan.candidates[dir].push_back({static_cast<int>(perf[i].algo), perf[i].mathType, perf[i].memory});
  MT_CHECK(!plan.candidates[dir].empty(), "conv2d: cuDNN found no ", direction_name(d), " algorithm for this shape");
}

// Ranks the algorithms of one direction (once per plan); benchmark mode times the candidates
// on buffers cuDNN allocates itself. The query runs under the dtype's math type, whatever an
// earlier direction left on the shared descriptor.
void choose(ConvPlan& plan, ConvDirection d, cudnnHandle_t h) {
  const int dir = static_cast<int>(d);
  if (!plan.candidates[dir].empty()) return;
  MT_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv, plan.wanted));
  const bool bench = mixtrain::cuda::cudnn_benchmark();
  constexpr int kMax = 16;
  int count = 0;
  if (d == ConvDirection::Forward) {
    cudnnConvolutionFwdAlgoPerf_t perf[kMax];
    if (bench)
      MT_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithm(h, plan.x, plan.w, plan.conv, plan.y, kMax, &count, perf));
    else
      MT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, plan.x, plan.w, plan.conv, plan.y, kMax, &count, perf));
    take_ranked(perf, count, d, plan);
  } else if (d == ConvDirection::BackwardInput) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[kMax];
    if (bench)
      MT_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithm(h, plan.w, plan.y, plan.conv, plan.x, kMax, &count, perf));
    else
      MT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, plan.w, plan.y, plan.conv, plan.x, kMax, &count, perf));
    take_ranked(perf, count, d, plan);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[kMax];
    if (bench)
      MT_CUDNN_CHECK(
          cudnnFindConvolutionBackwardFilterAlgorithm(h, plan.x, plan.y, plan.conv, plan.w, kMax, &count, perf));
    else
      MT_CUDNN_CHECK(
          cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, plan.x, plan.y, plan.conv, plan.w, kMax, &count, perf));
    take_ranked(perf, count, d, plan);
  }
}

struct PlanCache {
  std::mutex mutex;
  std::map<ConvKey, ConvPlan> plans;
};

PlanCache& plan_cache() {
  static PlanCache* cache = new PlanCache();
  return *cache;
}

// The cached plan of g on ctx's device with direction d ranked; the caller holds the cache's lock.
ConvPlan& ranked_plan(PlanCache& cache, const Geometry& g, ConvDirection d, DeviceContext& ctx) {
  const Conv2dParams& p = g.p;
  const ConvKey key{static_cast<int64_t>(g.dt), ctx.index, g.n, g.c, g.h, g.w, g.cout, g.kh, g.kw, g.ho, g.wo,
                    p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w, p.groups,
                    mixtrain::cuda::cudnn_allow_tf32(), mixtrain::cuda::cudnn_benchmark(), g.nhwc};
  auto it = cache.plans.find(key);
  if (it == cache.plans.end()) it = cache.plans.emplace(key, make_plan(g)).first;
  choose(it->second, d, ctx.cudnn());
  return it->second;
}

// Runs `body(plan, algo, handle, workspace, workspace_bytes, alpha, beta)` -> cudnnStatus_t for one
// direction under the cache's lock, with the direction's algorithm in use, moving on to the next
// candidate while one fails.
template <class Body>
void with_plan(const Geometry& g, ConvDirection d, DeviceContext& ctx, Body&& body) {
  PlanCache& cache = plan_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  ConvPlan& plan = ranked_plan(cache, g, d, ctx);
  cudnnHandle_t h = ctx.cudnn();
  const int dir = static_cast<int>(d);
  const double a64 = 1.0, b64 = 0.0;
  const float a32 = 1.0f, b32 = 0.0f;
  const bool fp64 = g.dt == DType::Float64;
  std::string failures;
  for (; plan.in_use[dir] < plan.candidates[dir].size(); ++plan.in_use[dir]) {
    const Candidate& c = plan.candidates[dir][plan.in_use[dir]];
    MT_CUDNN_CHECK(cudnnSetConvolutionMathType(plan.conv, c.math));
    Tensor ws = c.workspace ? scratch(c.workspace, Device::cuda(ctx.index)) : Tensor();
    const cudnnStatus_t st = body(plan, c.algo, h, ws.defined() ? ws.raw_data() : nullptr, c.workspace,
                                  fp64 ? static_cast<const void*>(&a64) : &a32,
                                  fp64 ? static_cast<const void*>(&b64) : &b32);
    if (st == CUDNN_STATUS_SUCCESS) return;
    failures += std::string(failures.empty() ? "" : ", ") + "algorithm " + std::to_string(c.algo) + ": " +
                cudnnGetErrorString(st);
  }
  MT_ERROR("conv2d: every cuDNN ", direction_name(d), " algorithm failed for ", g.dt, " input [", g.n, ", ", g.c,
           ", ", g.h, ", ", g.w, "], weight [", g.cout, ", ", g.c / g.p.groups, ", ", g.kh, ", ", g.kw, "], ",
           g.nhwc ? "channels-last" : "NCHW", " (", failures, ")");
}

Geometry geometry(const Tensor& x_shape_of, const Tensor& w, const Tensor& y_shape_of, const Conv2dParams& p,
                  MemoryFormat layout) {
  return Geometry{x_shape_of.dtype(), x_shape_of.size(0), x_shape_of.size(1), x_shape_of.size(2), x_shape_of.size(3),
                  w.size(0), w.size(2), w.size(3), y_shape_of.size(2), y_shape_of.size(3), p,
                  layout == MemoryFormat::ChannelsLast};
}

}  // namespace

void conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& bias, const Conv2dParams& p,
                         const Tensor& out) {
  check_device("conv2d", out.device(), {&x_in, &w_in, &bias});
  DeviceContext& ctx = context(out);
  const MemoryFormat f = layout_of("conv2d", out, x_in);
  const Tensor x = as_layout(x_in, out.dtype(), f), w = as_layout(w_in, out.dtype(), f);
  if (out.numel() == 0) return;
  with_plan(geometry(x, w, out, p, f), ConvDirection::Forward, ctx,
            [&](ConvPlan& plan, int algo, cudnnHandle_t h, void* ws, size_t ws_bytes, const void* alpha,
                const void* beta) {
              return cudnnConvolutionForward(h, alpha, plan.x, x.raw_data(), plan.w, w.raw_data(), plan.conv,
                                             static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws, ws_bytes, beta, plan.y,
                                             out.raw_data());
            });
  if (bias.defined()) {
    const Tensor b = as_contiguous(bias, out.dtype()).reshape({1, out.size(1), 1, 1}).expand(out.shape());
    backends::binary(DeviceType::CUDA, BinaryOp::Add, out, b, out);
  }
}

void conv2d_backward_input(const Tensor& grad_out, const Tensor& w_in, const Conv2dParams& p,
                                        const Tensor& grad_x) {
  check_device("conv2d_backward_input", grad_x.device(), {&grad_out, &w_in});
  DeviceContext& ctx = context(grad_x);
  const MemoryFormat f = layout_of("conv2d", grad_x, grad_out);
  const Tensor dy = as_layout(grad_out, grad_x.dtype(), f), w = as_layout(w_in, grad_x.dtype(), f);
  if (grad_x.numel() == 0) return;
  if (dy.numel() == 0) return backends::fill(DeviceType::CUDA, grad_x, 0.0);
  with_plan(geometry(grad_x, w, dy, p, f), ConvDirection::BackwardInput, ctx,
            [&](ConvPlan& plan, int algo, cudnnHandle_t h, void* ws, size_t ws_bytes, const void* alpha,
                const void* beta) {
              return cudnnConvolutionBackwardData(h, alpha, plan.w, w.raw_data(), plan.y, dy.raw_data(), plan.conv,
                                                  static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws, ws_bytes, beta,
                                                  plan.x, grad_x.raw_data());
            });
}

void conv2d_backward_weight(const Tensor& grad_out, const Tensor& x_in, const Conv2dParams& p,
                                         const Tensor& grad_w) {
  check_device("conv2d_backward_weight", grad_w.device(), {&grad_out, &x_in});
  DeviceContext& ctx = context(grad_w);
  const MemoryFormat f = layout_of("conv2d", grad_w, x_in);
  const Tensor dy = as_layout(grad_out, grad_w.dtype(), f), x = as_layout(x_in, grad_w.dtype(), f);
  if (grad_w.numel() == 0) return;
  if (dy.numel() == 0) return backends::fill(DeviceType::CUDA, grad_w, 0.0);
  with_plan(geometry(x, grad_w, dy, p, f), ConvDirection::BackwardWeight, ctx,
            [&](ConvPlan& plan, int algo, cudnnHandle_t h, void* ws, size_t ws_bytes, const void* alpha,
                const void* beta) {
              return cudnnConvolutionBackwardFilter(h, alpha, plan.x, x.raw_data(), plan.y, dy.raw_data(), plan.conv,
                                                    static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), ws, ws_bytes,
                                                    beta, plan.w, grad_w.raw_data());
            });
}

// What with_plan would allocate as workspace for the kernel of `direction` (the algorithm in use,
// ranked now if this shape is new), allocating nothing; the same early returns as the kernels.
void conv2d_workspace_bytes(ConvDirection direction, const Tensor& x, const Tensor& w, const Tensor& y,
                            const Conv2dParams& p, int device, size_t* bytes) {
  *bytes = 0;
  const bool forward = direction == ConvDirection::Forward;
  const Tensor& out = forward ? y : direction == ConvDirection::BackwardInput ? x : w;
  const Tensor& activation = forward || direction == ConvDirection::BackwardWeight ? x : y;
  if (out.numel() == 0 || (!forward && y.numel() == 0)) return;
  const Geometry g = geometry(x, w, y, p, layout_of("conv2d", out, activation));
  PlanCache& cache = plan_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  const ConvPlan& plan = ranked_plan(cache, g, direction, context(device));
  const int dir = static_cast<int>(direction);
  if (plan.in_use[dir] < plan.candidates[dir].size()) *bytes = plan.candidates[dir][plan.in_use[dir]].workspace;
}

void register_conv() {
  backends::conv2d_workspace_bytes.set(DeviceType::CUDA, conv2d_workspace_bytes);
  backends::conv2d.set(DeviceType::CUDA, conv2d);
  backends::conv2d_backward_input.set(DeviceType::CUDA, conv2d_backward_input);
  backends::conv2d_backward_weight.set(DeviceType::CUDA, conv2d_backward_weight);
}

}  // namespace mixtrain::backends::cuda
