// The fused path of scaled_dot_product_attention: the inputs, expanded to the common batch dims
// and made contiguous, go to backends::attention_forward as [B, L, E]; the backward node sends the
// saved q, k, v, output and logsumexp to attention_backward and sums the gradients back over any
// batch dim that was broadcast. Dropout reserves the draws the composite's dropout() would (one per
// element of the [batch..., L, S] probabilities) and hands the kernels the seed and offset, so
// both paths drop the same elements and leave the generator in the same state; backward
// regenerates the mask from them.
#include "ops/attention_fused.h"

#include <atomic>

#include "backends/attention.h"
#include "mixtrain/autograd/node.h"
#include "mixtrain/base/rng.h"
#include "mixtrain/memory/dry_run.h"
#include "ops/op_helpers.h"

namespace mixtrain::ops {

namespace {

std::atomic<AttentionPath> path_in_force{AttentionPath::Measured};

// Where the composite (cuBLASLt GEMMs and the softmax kernels) measured faster than the fused
// kernels, forward + backward, causal, head dim 64, `bench_cuda --benchmark_filter=BM_Attention`
// beside PyTorch's SDPA (docs/BENCHMARKS.md, H200, 2026-11-28), in ms, fused / composite:
//   fp16  64x12 heads, L = S = 128: 1.15 / 0.270      8x12 heads, L = S = 1024: 4.31 / 0.874
//   bf16  64x12 heads, L = S = 128: 1.17 / 0.255      8x12 heads, L = S = 1024: 4.44 / 0.829
// Up to the longest sequence measured; longer ones keep the fused kernels, whose memory grows with
// L where the composite's scores grow with L * S. fp32 on CUDA was not measured. On the CPU the
// fused kernels were 1.5-2.6x faster at L = 1024 (docs/BENCHMARKS.md, "CPU: fused ..."): no row.
struct ComposedFaster {
  DeviceType device;
  DType dtype;
  int64_t max_len;  // L and S up to this
};
constexpr ComposedFaster kComposedFaster[] = {
    {DeviceType::CUDA, kFloat16, 1024},
    {DeviceType::CUDA, kBFloat16, 1024},
};

// t expanded to batch + its own last two dims, contiguous, as [B, rows, cols] (no autograd node:
// a private copy for the kernel).
Tensor kernel_operand(const Tensor& t, const Shape& batch, int64_t b) {
  NoGradGuard no_grad;
  Shape full = batch;
  full.insert(full.end(), {t.size(-2), t.size(-1)});
  return t.detach().expand(full).contiguous().view({b, t.size(-2), t.size(-1)});
}

}  // namespace

void set_attention_path(AttentionPath path) { path_in_force.store(path, std::memory_order_relaxed); }
AttentionPath attention_path() { return path_in_force.load(std::memory_order_relaxed); }

bool fused_attention_measured_faster(DeviceType device, DType dtype, int64_t l, int64_t s) {
  for (const ComposedFaster& row : kComposedFaster)
    if (row.device == device && row.dtype == dtype && l <= row.max_len && s <= row.max_len) return false;
  return true;
}

bool fused_attention_applies(const Tensor& q, const Tensor& attn_mask, int64_t s) {
  const AttentionPath path = attention_path();
  if (path == AttentionPath::Composite || attn_mask.defined() || s == 0) return false;
  // A dry run plans its target as a build with that backend runs it: a CUDA target has the fused
  // kernels the CUDA backend always registers, in a build without CUDA too.
  const bool planned = q.device().type == DeviceType::Meta;
  const DeviceType device = planned ? memory::dry_run_target().type : q.device().type;
  if (!backends::attention_forward.has(device) && !(planned && device == DeviceType::CUDA)) return false;
  return path == AttentionPath::Fused || fused_attention_measured_faster(device, q.dtype(), q.size(-2), s);
}

Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Shape& batch, double scale,
                       bool causal, double dropout_p) {
  const int64_t b = shape_numel(batch), l = q.size(-2), s = k.size(-2), e = q.size(-1), ev = v.size(-1);
  backends::AttentionShape sh{b, l, s, e, ev, scale, causal};
  if (dropout_p > 0.0) {
    const GeneratorState draws = default_generator().reserve_draws(static_cast<uint64_t>(b * l * s));
    sh.dropout_p = dropout_p;
    sh.seed = draws.seed;
    sh.offset = draws.offset;
  }
  const Tensor qc = kernel_operand(q, batch, b), kc = kernel_operand(k, batch, b), vc = kernel_operand(v, batch, b);
  Shape out_shape = batch;
  out_shape.insert(out_shape.end(), {l, ev});
  Tensor out = new_empty(out_shape, q);
  const Tensor lse = new_empty({b, l}, q, q.dtype() == kFloat64 ? kFloat64 : kFloat32);
  backends::attention_forward(q, qc, kc, vc, sh, out.view({b, l, ev}), lse);
  if (autograd::needs_grad({&q, &k, &v})) {
    const bool gq = q.requires_grad(), gk = k.requires_grad(), gv = v.requires_grad();
    const Shape qs = q.shape(), ks = k.shape(), vs = v.shape();
    const autograd::SavedTensor q_s = autograd::saved(qc, "input 0 (query)"), k_s = autograd::saved(kc, "input 1 (key)"),
                                v_s = autograd::saved(vc, "input 2 (value)"), o_s = autograd::saved(out, "output 0");
    autograd::record("ScaledDotProductAttentionBackward0", {&out}, {&q, &k, &v}, [=](const TensorList& g) {
      const Tensor& qv = q_s;
      const Tensor go = g[0].to(qv.dtype()).contiguous().view({b, l, ev});
      const Tensor dq = new_empty({b, l, e}, qv), dk = new_empty({b, s, e}, qv), dv = new_empty({b, s, ev}, qv);
      backends::attention_backward(qv, qv, k_s, v_s, o_s.unpack().view({b, l, ev}), go, lse, sh, dq, dk, dv);
      auto back = [&](bool wanted, const Tensor& grad, const Shape& shape, int64_t rows, int64_t cols) {
        if (!wanted) return Tensor();
        Shape full = batch;
        full.insert(full.end(), {rows, cols});
        return sum_to(grad.view(full), shape);
      };
      return TensorList{back(gq, dq, qs, l, e), back(gk, dk, ks, s, e), back(gv, dv, vs, s, ev)};
    });
  }
  return out;
}

}  // namespace mixtrain::ops
