// Convolutions on oneDNN's primitives (onednn.h): forward, backward-data (also the forward of
// conv_transpose2d) and backward-weights, fp32 and bf16 (fp32 accumulation, one rounding to
// nearest even). On a CPU where oneDNN has no bf16 (below AVX-512), bf16 calls run its fp32
// primitives: each unit's bf16 inputs are widened (exactly) into fp32 copies in their own layout
// with the vectorized bulk conversion, and each fp32 output is rounded to nearest even into the
// bf16 tensor once: the same contract. (oneDNN 2.6's own bf16 <-> f32 reorders run on its generic
// loops there, many times slower than the convolution.) oneDNN's fast convolutions work on blocked layouts (nChw16c and the like, its
// "any" format): its plain-NCHW path is im2col + GEMM, 2-20x slower in our measurements. So the
// activations are reordered into the primitive's layout and back around each call, a pass over
// memory that the blocked kernel more than pays for. NCHW and channels-last tensors are both
// described in place, with their strides, so neither is copied to the other first.
//
// Work is cut into units of samples (at most kUnitBytes of activations each, so the per-thread
// buffers stay bounded) and the units into one run per thread (engine.h: one-thread primitives,
// run_parallel). The weight gradient is summed in fp32 per unit, then per run, then over the runs
// in order, and rounded once: the cut depends on the shape and the full thread count only, so the
// result does not depend on the governor. The weights are reordered into the primitive's layout
// once per call, not per unit: in a step each weight meets the forward and the backward-data
// primitive once each, whose layouts differ, so a copy kept between calls would not be reused.
#include "mixtrain/config.h"

#include "backends/cpu/onednn/onednn.h"

#if defined(MIXTRAIN_WITH_ONEDNN)

#include <algorithm>

#include "backends/cpu/onednn/engine.h"
#include "backends/cpu/verbose.h"

namespace mixtrain::backends::cpu {

namespace {

using dnnl::memory;

enum class Dir { Forward, BackwardInput, BackwardWeight };

// Activations of one unit at most this large (input plus output, fp32): the buffers each thread
// keeps for the blocked copies stay below about twice this.
constexpr int64_t kUnitBytes = int64_t{16} << 20;

// The call's tensors in conv2d's roles: x [N, C, H, W], w [Co, C / groups, kh, kw] and
// y [N, Co, Ho, Wo], whichever of them the direction reads or writes.
struct ConvArgs {
  const Tensor &x, &w, &y;
  const Tensor& bias;
  const Conv2dParams& p;
  Dir dir;
};

struct ConvPlan {
  dnnl::primitive prim;
  memory::desc scratchpad;
  memory::desc x_user, x, w_user, w, y_user, y, bias;  // ours for one unit, and the primitive's
  onednn::Reorder x_reorder, w_reorder, y_reorder;      // only where the two differ
  bool x_moves = false, w_moves = false, y_moves = false;
  std::string impl;
};

onednn::PlanCache<ConvPlan>& conv_plans() {
  static onednn::PlanCache<ConvPlan> cache;
  return cache;
}

const char* dir_name(Dir d) {
  return d == Dir::Forward ? "conv2d" : d == Dir::BackwardInput ? "conv2d_backward_input" : "conv2d_backward_weight";
}

std::string describe(const ConvArgs& a) { return conv_operands(a.x, a.w, a.y, a.bias, a.p); }

memory::data_type dnnl_type(DType t) { return t == kBFloat16 ? memory::data_type::bf16 : memory::data_type::f32; }

// What the primitives compute in: the tensors' dtype, or fp32 for bf16 where oneDNN has no bf16.
memory::data_type compute_type(DType t) {
  return t == kBFloat16 && !onednn_runs_bf16() ? memory::data_type::f32 : dnnl_type(t);
}

// Our tensors as the primitives see them: in place, or (widened) fp32 copies of the same layout.
memory::desc activation(const Tensor& t, int64_t samples) {
  return memory::desc({samples, t.size(1), t.size(2), t.size(3)}, compute_type(t.dtype()),
                      {t.stride(0), t.stride(1), t.stride(2), t.stride(3)});
}

memory::dims weight_dims(const Tensor& w, int64_t groups) {
  if (groups == 1) return {w.size(0), w.size(1), w.size(2), w.size(3)};
  return {groups, w.size(0) / groups, w.size(1), w.size(2), w.size(3)};
}

memory::desc weights(const Tensor& w, int64_t groups) {
  if (groups == 1) return memory::desc(weight_dims(w, 1), compute_type(w.dtype()), {w.stride(0), w.stride(1), w.stride(2), w.stride(3)});
  return memory::desc(weight_dims(w, groups), compute_type(w.dtype()),
                      {w.size(0) / groups * w.stride(0), w.stride(0), w.stride(1), w.stride(2), w.stride(3)});
}

memory::desc any(memory::dims dims, memory::data_type dt) { return memory::desc(dims, dt, memory::format_tag::any); }

// Samples per unit (fixed by the shape and the backend's thread count), and the units.
struct Cut {
  int64_t unit, units;
  int parts;
};

Cut cut_of(const ConvArgs& a) {
  const int64_t n = a.x.size(0), full = onednn::full_parts();
  const int64_t sample_bytes = 4 * (a.x.numel() / n + a.y.numel() / n);
  const int64_t per_part = (n + full - 1) / full;
  const int64_t unit = std::clamp<int64_t>(kUnitBytes / std::max<int64_t>(sample_bytes, 1), 1, per_part);
  const int64_t units = (n + unit - 1) / unit;
  return {unit, units, static_cast<int>(std::min(full, units))};
}

// The plan for units of `samples` samples. `anchor`, when given, is the plan of the call's full
// units: a shorter last unit must use its weight layout (the weights are reordered once per call,
// and weight gradients of all units are summed in that layout).
std::shared_ptr<const ConvPlan> plan_for(const ConvArgs& a, int64_t samples, const ConvPlan* anchor,
                                         int64_t anchor_samples, const std::function<std::string()>& operands) {
  const Conv2dParams& p = a.p;
  const memory::data_type dt = compute_type(a.x.dtype());
  onednn::Key key;
  key << static_cast<int64_t>(a.dir) << static_cast<int64_t>(a.x.dtype()) << static_cast<int64_t>(dt) << samples << anchor_samples << a.bias.defined();
  for (const Tensor* t : {&a.x, &a.w, &a.y})
    for (int64_t d = 0; d < 4; ++d) key << t->size(d) << t->stride(d);
  key << p.stride_h << p.stride_w << p.pad_h << p.pad_w << p.dilation_h << p.dilation_w << p.groups;
  return conv_plans().get(key.str(), [&]() -> std::shared_ptr<const ConvPlan> {
    return onednn::try_plan<ConvPlan>(dir_name(a.dir), operands, [&]() -> std::shared_ptr<const ConvPlan> {
      auto plan = std::make_shared<ConvPlan>();
      plan->x_user = activation(a.x, samples);
      plan->y_user = activation(a.y, samples);
      plan->w_user = weights(a.w, p.groups);
      // The weight gradient is produced and summed in fp32, and rounded once at the end.
      const memory::data_type wdt = a.dir == Dir::BackwardWeight ? memory::data_type::f32 : dt;
      const memory::desc x_any = any({samples, a.x.size(1), a.x.size(2), a.x.size(3)}, dt);
      const memory::desc y_any = any({samples, a.y.size(1), a.y.size(2), a.y.size(3)}, dt);
      const memory::desc w_data = any(weight_dims(a.w, p.groups), dt);
      const memory::desc w_req = anchor ? anchor->w : any(weight_dims(a.w, p.groups), wdt);
      const memory::dims strides{p.stride_h, p.stride_w}, dilates{p.dilation_h - 1, p.dilation_w - 1};
      const memory::dims pad_l{p.pad_h, p.pad_w};
      // The right padding that makes oneDNN's output size ours (negative where the stride skips
      // the last rows or columns).
      const memory::dims pad_r{(a.y.size(2) - 1) * p.stride_h + (a.w.size(2) - 1) * p.dilation_h + 1 - a.x.size(2) - p.pad_h,
                               (a.y.size(3) - 1) * p.stride_w + (a.w.size(3) - 1) * p.dilation_w + 1 - a.x.size(3) - p.pad_w};
      if (a.bias.defined()) plan->bias = memory::desc({a.w.size(0)}, dt, memory::format_tag::a);
      const dnnl::primitive_attr attr = onednn::user_scratchpad();
      const auto algo = dnnl::algorithm::convolution_direct;
      using Fwd = dnnl::convolution_forward;
      const Fwd::primitive_desc fwd(
          Fwd::desc(dnnl::prop_kind::forward_training, algo, x_any, a.dir == Dir::BackwardWeight ? w_data : w_req,
                    plan->bias, y_any, strides, dilates, pad_l, pad_r),
          attr, onednn::engine());
      const char* impl = nullptr;
      if (a.dir == Dir::Forward) {
        impl = fwd.impl_info_str();
        plan->x = fwd.src_desc(), plan->w = fwd.weights_desc(), plan->y = fwd.dst_desc();
        plan->scratchpad = fwd.scratchpad_desc();
        plan->prim = Fwd(fwd);
      } else if (a.dir == Dir::BackwardInput) {
        using Bwd = dnnl::convolution_backward_data;
        const Bwd::primitive_desc pd(Bwd::desc(algo, x_any, w_req, y_any, strides, dilates, pad_l, pad_r), attr,
                                     onednn::engine(), fwd);
        impl = pd.impl_info_str();
        plan->x = pd.diff_src_desc(), plan->w = pd.weights_desc(), plan->y = pd.diff_dst_desc();
        plan->scratchpad = pd.scratchpad_desc();
        plan->prim = Bwd(pd);
      } else {
        using Bww = dnnl::convolution_backward_weights;
        const Bww::primitive_desc pd(Bww::desc(algo, x_any, w_req, memory::desc(), y_any, strides, dilates, pad_l, pad_r),
                                     attr, onednn::engine(), fwd);
        impl = pd.impl_info_str();
        plan->x = pd.src_desc(), plan->w = pd.diff_weights_desc(), plan->y = pd.diff_dst_desc();
        plan->scratchpad = pd.scratchpad_desc();
        plan->prim = Bww(pd);
      }
      if (!onednn::fast_impl(impl)) return nullptr;
      plan->impl = impl;
      const bool x_in = a.dir != Dir::BackwardInput, y_in = a.dir != Dir::Forward, w_in = a.dir != Dir::BackwardWeight;
      plan->x_moves = plan->x != plan->x_user;
      plan->y_moves = plan->y != plan->y_user;
      plan->w_moves = true;  // the weight gradient always goes through the fp32 sum
      if (w_in) plan->w_moves = plan->w != plan->w_user;
      if (plan->x_moves) plan->x_reorder = x_in ? onednn::make_reorder(plan->x_user, plan->x) : onednn::make_reorder(plan->x, plan->x_user);
      if (plan->y_moves) plan->y_reorder = y_in ? onednn::make_reorder(plan->y_user, plan->y) : onednn::make_reorder(plan->y, plan->y_user);
      if (plan->w_moves) plan->w_reorder = w_in ? onednn::make_reorder(plan->w_user, plan->w) : onednn::make_reorder(plan->w, plan->w_user);
      return plan;
    });
  });
}

// Adds n floats of `from` into `to`.
void add_into(float* to, const float* from, size_t n) {
  for (size_t i = 0; i < n; ++i) to[i] += from[i];
}

// The operands oneDNN takes here: fp32 or bf16 throughout, dense, non-empty, a unit-stride bias,
// and (OneDnnMode::Sized) enough work and channels to gain from it.
bool onednn_takes(const ConvArgs& a, OneDnnMode mode) {
  const DType dt = a.x.dtype();
  if (mode == OneDnnMode::Off || (dt != kFloat32 && dt != kBFloat16) || a.w.dtype() != dt || a.y.dtype() != dt) return false;
  if (!a.x.is_dense() || !a.w.is_dense() || !a.y.is_dense() || a.x.numel() == 0 || a.y.numel() == 0 || a.w.numel() == 0)
    return false;
  if (a.bias.defined() && (a.bias.dtype() != dt || a.bias.stride(0) != 1)) return false;
  const int64_t macs = a.y.numel() * (a.w.numel() / a.w.size(0));  // each output: C / groups x kh x kw taps
  const int64_t cg = a.w.size(1), cog = a.w.size(0) / a.p.groups;
  const bool depthwise = cg == 1 && a.p.groups > 1;
  return mode != OneDnnMode::Sized ||
         (macs >= kOneDnnConvMinMacs && (depthwise || std::min(cg, cog) >= kOneDnnConvMinChannels));
}

// What one call's units share: the plans (full units and the last), the operands' base pointers,
// the weights and bias as the primitives read them, and the weight gradient's per-run fp32 sums.
struct ConvCall {
  const ConvArgs& a;
  Cut cut;
  int64_t n = 0;
  std::shared_ptr<const ConvPlan> full, last;
  bool wide = false;  // bf16 operands widened to fp32 (no bf16 in oneDNN here)
  int64_t es = 0;
  const char* px = nullptr;
  const char* py = nullptr;
  const char* pw = nullptr;
  const void* pbias = nullptr;
  std::vector<onednn::AlignedBuffer> sums;
  size_t wbytes = 0;
};

// Unit u of run r (whose first unit is u0): the primitive on the unit's samples, through the
// layout buffers and the fp32 copies it needs.
void run_unit(ConvCall& c, int r, int64_t u, int64_t u0) {
  const ConvArgs& a = c.a;
  const ConvPlan& plan = u + 1 == c.cut.units ? *c.last : *c.full;
  const int64_t s0 = u * c.cut.unit;
  // Our unit (its fp32 copy when widened) and where the primitive reads or writes it.
  const int64_t samples = u + 1 == c.cut.units ? c.n - s0 : c.cut.unit;
  const int64_t x_count = samples * a.x.stride(0), y_count = samples * a.y.stride(0);
  const bool x_in = a.dir != Dir::BackwardInput, y_in = a.dir != Dir::Forward;
  char* const x_user = const_cast<char*>(c.px) + s0 * a.x.stride(0) * c.es;
  char* const y_user = const_cast<char*>(c.py) + s0 * a.y.stride(0) * c.es;
  const char* xs = x_user;
  const char* ys = y_user;
  if (c.wide) {
    using onednn::Slot;
    xs = reinterpret_cast<const char*>(x_in ? onednn::widen(x_user, x_count, Slot::WideX)
                                            : onednn::wide_buffer(x_count, Slot::WideX));
    ys = reinterpret_cast<const char*>(y_in ? onednn::widen(y_user, y_count, Slot::WideY)
                                            : onednn::wide_buffer(y_count, Slot::WideY));
  }
  void* xb = plan.x_moves ? onednn::thread_buffer(onednn::Slot::Source, plan.x.get_size()) : const_cast<char*>(xs);
  void* yb = plan.y_moves ? onednn::thread_buffer(onednn::Slot::Destination, plan.y.get_size()) : const_cast<char*>(ys);
  std::unordered_map<int, memory> args;
  if (a.dir == Dir::Forward) {
    if (plan.x_moves) onednn::run_reorder(plan.x_reorder, xs, xb);
    args = {{DNNL_ARG_SRC, onednn::wrap(plan.x, xb)}, {DNNL_ARG_WEIGHTS, onednn::wrap(plan.w, c.pw)},
            {DNNL_ARG_DST, onednn::wrap(plan.y, yb)}};
    if (c.pbias) args.emplace(DNNL_ARG_BIAS, onednn::wrap(plan.bias, c.pbias));
    onednn::execute(plan.prim, plan.scratchpad, std::move(args));
    if (plan.y_moves) onednn::run_reorder(plan.y_reorder, yb, const_cast<char*>(ys));
    if (c.wide) onednn::narrow(reinterpret_cast<const float*>(ys), y_user, y_count);
  } else if (a.dir == Dir::BackwardInput) {
    if (plan.y_moves) onednn::run_reorder(plan.y_reorder, ys, yb);
    args = {{DNNL_ARG_DIFF_DST, onednn::wrap(plan.y, yb)}, {DNNL_ARG_WEIGHTS, onednn::wrap(plan.w, c.pw)},
            {DNNL_ARG_DIFF_SRC, onednn::wrap(plan.x, xb)}};
    onednn::execute(plan.prim, plan.scratchpad, std::move(args));
    if (plan.x_moves) onednn::run_reorder(plan.x_reorder, xb, const_cast<char*>(xs));
    if (c.wide) onednn::narrow(reinterpret_cast<const float*>(xs), x_user, x_count);
  } else {
    if (plan.x_moves) onednn::run_reorder(plan.x_reorder, xs, xb);
    if (plan.y_moves) onednn::run_reorder(plan.y_reorder, ys, yb);
    float* sum = static_cast<float*>(c.sums[static_cast<size_t>(r)].data());
    float* into = u == u0 ? sum : static_cast<float*>(onednn::thread_buffer(onednn::Slot::DiffWeights, c.wbytes));
    args = {{DNNL_ARG_SRC, onednn::wrap(plan.x, xb)}, {DNNL_ARG_DIFF_DST, onednn::wrap(plan.y, yb)},
            {DNNL_ARG_DIFF_WEIGHTS, onednn::wrap(plan.w, into)}};
    onednn::execute(plan.prim, plan.scratchpad, std::move(args));
    if (into != sum) add_into(sum, into, c.wbytes / sizeof(float));
  }
}

// The weights (and a bf16 bias, widened) as the primitives read them, once for the call, on this
// thread; the weight gradient's per-run sums.
void prepare_weights(ConvCall& c, const std::function<std::string()>& operands) {
  const ConvArgs& a = c.a;
  const bool weight_grad = a.dir == Dir::BackwardWeight;
  c.pw = static_cast<const char*>(a.w.raw_data());
  if (c.wide && !weight_grad)
    c.pw = reinterpret_cast<const char*>(onednn::widen(a.w.raw_data(), a.w.numel(), onednn::Slot::WideWeights));
  if (!weight_grad && c.full->w_moves) {
    void* reordered = onednn::thread_buffer(onednn::Slot::Weights, c.full->w.get_size());
    onednn::run_here(dir_name(a.dir), operands, [&] { onednn::run_reorder(c.full->w_reorder, c.pw, reordered); });
    c.pw = static_cast<const char*>(reordered);
  }
  c.pbias = a.bias.defined() ? a.bias.raw_data() : nullptr;
  if (c.pbias && c.wide) c.pbias = onednn::widen(c.pbias, a.bias.numel(), onednn::Slot::WideBias);
  c.wbytes = c.full->w.get_size();
  if (weight_grad)
    for (int r = 0; r < c.cut.parts; ++r) c.sums.emplace_back(c.wbytes);
}

// The runs' weight-gradient sums added into the first and written in the user's layout (and dtype).
void write_weight_grad(ConvCall& c, const std::function<std::string()>& operands) {
  const ConvArgs& a = c.a;
  float* total = static_cast<float*>(c.sums[0].data());
  for (size_t r = 1; r < c.sums.size(); ++r)
    add_into(total, static_cast<const float*>(c.sums[r].data()), c.wbytes / sizeof(float));
  onednn::run_here(dir_name(a.dir), operands, [&] {
    if (!c.wide) return onednn::run_reorder(c.full->w_reorder, total, a.w.raw_data());
    float* sum = onednn::wide_buffer(a.w.numel(), onednn::Slot::WideWeights);
    onednn::run_reorder(c.full->w_reorder, total, sum);
    onednn::narrow(sum, a.w.raw_data(), a.w.numel());
  });
}

bool run(const ConvArgs& a, std::string& impl) {
  if (!onednn_takes(a, onednn_mode())) return false;
  // Widened (no bf16 in oneDNN here): units are copied whole, so the batch must be outermost.
  const bool wide = a.x.dtype() == kBFloat16 && !onednn_runs_bf16();
  if (wide && (a.x.stride(0) * a.x.size(0) != a.x.numel() || a.y.stride(0) * a.y.size(0) != a.y.numel())) return false;
  const std::function<std::string()> operands = [&] { return describe(a); };
  ConvCall c{a, cut_of(a), 0, nullptr, nullptr};
  c.n = a.x.size(0);
  const int64_t tail = c.n - (c.cut.units - 1) * c.cut.unit;
  c.full = plan_for(a, c.cut.unit, nullptr, 0, operands);
  if (!c.full) return false;
  c.last = tail == c.cut.unit ? c.full : plan_for(a, tail, c.full.get(), c.cut.unit, operands);
  if (!c.last) return false;
  c.wide = wide;
  c.es = static_cast<int64_t>(element_size(a.x.dtype()));
  c.px = static_cast<const char*>(a.x.raw_data());
  c.py = static_cast<const char*>(a.y.raw_data());
  prepare_weights(c, operands);
  onednn::run_parts(c.cut.parts, dir_name(a.dir), operands, [&](int r) {
    const int64_t u0 = r * c.cut.units / c.cut.parts, u1 = (r + 1) * c.cut.units / c.cut.parts;
    for (int64_t u = u0; u < u1; ++u) run_unit(c, r, u, u0);
  });
  if (a.dir == Dir::BackwardWeight) write_weight_grad(c, operands);
  onednn::calls.fetch_add(1, std::memory_order_relaxed);
  impl = "onednn:" + c.full->impl;
  return true;
}

}  // namespace

bool onednn_conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p, const Tensor& out,
                   std::string& impl) {
  return run(ConvArgs{x, w, out, bias, p, Dir::Forward}, impl);
}

bool onednn_conv2d_backward_input(const Tensor& grad_out, const Tensor& w, const Conv2dParams& p,
                                  const Tensor& grad_x, std::string& impl) {
  const Tensor none;
  return run(ConvArgs{grad_x, w, grad_out, none, p, Dir::BackwardInput}, impl);
}

bool onednn_conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Conv2dParams& p,
                                   const Tensor& grad_w, std::string& impl) {
  const Tensor none;
  return run(ConvArgs{x, grad_w, grad_out, none, p, Dir::BackwardWeight}, impl);
}

}  // namespace mixtrain::backends::cpu

#else  // a library without oneDNN: every call stays on the own kernels

namespace mixtrain::backends::cpu {

bool onednn_conv2d(const Tensor&, const Tensor&, const Tensor&, const Conv2dParams&, const Tensor&, std::string&) {
  return false;
}
bool onednn_conv2d_backward_input(const Tensor&, const Tensor&, const Conv2dParams&, const Tensor&, std::string&) {
  return false;
}
bool onednn_conv2d_backward_weight(const Tensor&, const Tensor&, const Conv2dParams&, const Tensor&, std::string&) {
  return false;
}

}  // namespace mixtrain::backends::cpu

#endif  // MIXTRAIN_WITH_ONEDNN
