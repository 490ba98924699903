// The optimizers' fused updates: one pass per parameter reads weight, gradient and state, updates
// in fp32 (fp64 for fp64 weights), and writes weight, state and, with master weights, the half
// parameter rounded from the updated fp32 copy. The element update is adam_update / sgd_update of
// backends/optim_math.h, which the CPU loops run too (backends/cpu/optim.cpp).
#include "kernels/cuda/optim.h"
#include "backends/optim_math.h"
#include "common.cuh"

namespace mixtrain::kernels {

namespace {

// The device side of a backends::StepGate. With the gate closed every thread returns at once, so
// the one thread that counts the skip writes the counter while no other thread reads it.
__device__ __forceinline__ bool gate_closed(const float* found_inf, int32_t* skipped_steps, int64_t& step) {
  if (skipped_steps == nullptr) return false;
  if (found_inf != nullptr && *found_inf != 0.0f) {
    if (blockIdx.x == 0 && threadIdx.x == 0) *skipped_steps += 1;
    return true;
  }
  step -= *skipped_steps;
  return false;
}

template <class W, class G, class H>
__global__ void adam_kernel(W* __restrict__ weight, const G* __restrict__ grad, W* __restrict__ m, W* __restrict__ v,
                            W* __restrict__ vmax, H* __restrict__ half_out, int64_t n,
                            backends::AdamScalars<acc_t<W>> s, backends::AdamArgs a, const float* found_inf,
                            int32_t* skipped_steps) {
  using C = acc_t<W>;
  int64_t step = a.step;
  if (gate_closed(found_inf, skipped_steps, step)) return;
  if (skipped_steps) backends::adam_set_step(s, a, step);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    C mi = convert<C>(m[i]), vi = convert<C>(v[i]), vm = s.amsgrad ? convert<C>(vmax[i]) : C(0);
    const C p = backends::adam_update(convert<C>(weight[i]), convert<C>(grad[i]), mi, vi, vm, s);
    m[i] = convert<W>(mi);
    v[i] = convert<W>(vi);
    if (s.amsgrad) vmax[i] = convert<W>(vm);
    weight[i] = convert<W>(p);
    if (half_out) half_out[i] = convert<H>(p);
  }
}

template <class W, class G, class H>
__global__ void sgd_kernel(W* __restrict__ weight, const G* __restrict__ grad, W* __restrict__ buf,
                           H* __restrict__ half_out, int64_t n, backends::SgdScalars<acc_t<W>> s, backends::SgdArgs a,
                           const float* found_inf, int32_t* skipped_steps) {
  using C = acc_t<W>;
  int64_t step = a.step;
  if (gate_closed(found_inf, skipped_steps, step)) return;
  if (skipped_steps) s.mom = backends::sgd_momentum_mode(a, step);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    C b = s.mom == 2 ? convert<C>(buf[i]) : C(0);
    const C w = backends::sgd_update(convert<C>(weight[i]), convert<C>(grad[i]), b, s);
    if (s.mom != 0) buf[i] = convert<W>(b);
    weight[i] = convert<W>(w);
    if (half_out) half_out[i] = convert<H>(w);
  }
}

// Calls f(Tag<W>, Tag<G>, Tag<H>) for the dtype combinations the optimizers produce: state in the
// weight's dtype; the gradient in it or, for fp32 master weights, fp16/bf16; half_out fp16/bf16.
template <class F>
void dispatch_update(DType w, DType g, DType h, const char* op, F&& f) {
  dispatch_floating(w, op, [&](auto wt) {
    using W = typename decltype(wt)::type;
    auto with_grad = [&](auto gt) {
      if (h == DType::Float16) f(wt, gt, Tag<__half>{});
      else if (h == DType::BFloat16) f(wt, gt, Tag<__nv_bfloat16>{});
      else f(wt, gt, Tag<W>{});  // no half_out: the pointer is null, the type unused
    };
    if (g == w) return with_grad(Tag<W>{});
    if constexpr (std::is_same_v<W, float>) {
      if (g == DType::Float16) return with_grad(Tag<__half>{});
      if (g == DType::BFloat16) return with_grad(Tag<__nv_bfloat16>{});
    }
    MT_ERROR(op, ": a ", w, " weight with a ", g, " gradient is not supported");
  });
}

}  // namespace

void adam_step(DType w, DType g, DType h, void* weight, const void* grad, void* exp_avg, void* exp_avg_sq,
               void* max_exp_avg_sq, void* half_out, int64_t n, const backends::AdamArgs& a, const float* found_inf,
               int32_t* skipped_steps, cudaStream_t stream) {
  if (n == 0 && skipped_steps == nullptr) return;  // a gated update still counts its skip
  const char* op = a.decoupled ? "AdamW.step" : "Adam.step";
  dispatch_update(w, g, half_out ? h : w, op, [&](auto wt, auto gt, auto ht) {
    using W = typename decltype(wt)::type;
    using G = typename decltype(gt)::type;
    using H = typename decltype(ht)::type;
    const backends::AdamScalars<acc_t<W>> s = backends::adam_scalars<acc_t<W>>(a);
    adam_kernel<W, G, H><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<W*>(weight), static_cast<const G*>(grad), static_cast<W*>(exp_avg), static_cast<W*>(exp_avg_sq),
        static_cast<W*>(max_exp_avg_sq), static_cast<H*>(half_out), n, s, a, found_inf, skipped_steps);
  });
  check_launch(op);
}

void sgd_step(DType w, DType g, DType h, void* weight, const void* grad, void* momentum_buffer, void* half_out,
              int64_t n, const backends::SgdArgs& a, const float* found_inf, int32_t* skipped_steps,
              cudaStream_t stream) {
  if (n == 0 && skipped_steps == nullptr) return;  // a gated update still counts its skip
  dispatch_update(w, g, half_out ? h : w, "SGD.step", [&](auto wt, auto gt, auto ht) {
    using W = typename decltype(wt)::type;
    using G = typename decltype(gt)::type;
    using H = typename decltype(ht)::type;
    const backends::SgdScalars<acc_t<W>> s = backends::sgd_scalars<acc_t<W>>(a);
    sgd_kernel<W, G, H><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<W*>(weight), static_cast<const G*>(grad), static_cast<W*>(momentum_buffer),
        static_cast<H*>(half_out), n, s, a, found_inf, skipped_steps);
  });
  check_launch("SGD.step");
}

}  // namespace mixtrain::kernels
