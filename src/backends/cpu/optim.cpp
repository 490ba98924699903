// The CPU backend's fused optimizer updates (backends::adam_step, sgd_step in backends/optim.h): one pass over a
// parameter's elements reads the weight, the gradient and the state, computes in fp32 (fp64 for
// fp64 weights) and stores each result once. Large tensors are split across OpenMP threads;
// elements are independent, so the result does not depend on the thread count (resumed runs are
// bit-identical). The optimizers check the operands (src/optim/fused_update.cpp).
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loops.h"
#include "backends/optim.h"
#include "backends/optim_math.h"
#include "mixtrain/base/error.h"
#include "mixtrain/base/half.h"

namespace mixtrain::backends::cpu {

namespace {

// Half operands are converted block by block into stack buffers (vectorized F16C conversions),
// so the arithmetic loops below only ever see float or double arrays and vectorize.
constexpr int64_t kBlock = 1024;
constexpr int64_t kGrain = 1 << 15;

template <class C>
C* view_block(const Tensor& t, int64_t begin, int64_t n, C* tmp) {
  if (t.dtype() == dtype_of<C>::value) return static_cast<C*>(t.raw_data()) + begin;
  if constexpr (std::is_same_v<C, float>) {
    if (t.dtype() == kFloat16) {
      half_to_float_array(static_cast<const Half*>(t.raw_data()) + begin, tmp, n);
      return tmp;
    }
    if (t.dtype() == kBFloat16) {
      bf16_to_float_array(static_cast<const BFloat16*>(t.raw_data()) + begin, tmp, n);
      return tmp;
    }
  }
  MT_ERROR("optimizer step: unsupported operand dtype ", t.dtype());
}

// Stores a block computed in C into t (nothing to do when the block was a view into t).
template <class C>
void store_block(const Tensor& t, int64_t begin, int64_t n, const C* src) {
  if (t.dtype() == dtype_of<C>::value) {
    C* dst = static_cast<C*>(t.raw_data()) + begin;
    if (dst != src) std::copy(src, src + n, dst);
    return;
  }
  if constexpr (std::is_same_v<C, float>) {
    if (t.dtype() == kFloat16) return float_to_half_array(src, static_cast<Half*>(t.raw_data()) + begin, n);
    if (t.dtype() == kBFloat16) return float_to_bf16_array(src, static_cast<BFloat16*>(t.raw_data()) + begin, n);
  }
  MT_ERROR("optimizer step: unsupported operand dtype ", t.dtype());
}


// ---- Adam -------------------------------------------------------------------------------------

// The element update is adam_update / sgd_update of backends/optim_math.h, which the CUDA kernels
// run too; these loops give it contiguous float or double arrays.
// The element loops are also compiled for AVX2 and picked at load time where the CPU has it (a
// portable build's own vectors are 128 bits). Not FMA: contracting a * b + c would change the
// rounding, and results must not depend on the CPU. clang (14, which builds the fuzz targets)
// cannot clone function templates, so a clang build keeps the portable loops; so does a
// ThreadSanitizer build, whose runtime is not up yet when the clones' ifunc resolvers run.
#if (defined(__x86_64__) || defined(__i386__)) && !defined(__AVX2__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define MT_CLONES_AVX2 __attribute__((target_clones("avx2", "default")))
#else
#define MT_CLONES_AVX2
#endif

template <class C, int Mode, bool Amsgrad, bool LerpSmall>
MT_CLONES_AVX2 void adam_core(C* w, const C* g, C* m, C* v, C* vmax, int64_t n, const AdamScalars<C>& scalars) {
  // A local copy: through the reference the compiler must assume the stores below may change the
  // scalars, reloads them every element and does not vectorize.
  const AdamScalars<C> s = scalars;
  C unused = C(0);  // vmax's stand-in without amsgrad
  for (int64_t i = 0; i < n; ++i) {
    C mi = m[i], vi = v[i];
    w[i] = adam_update<Mode, Amsgrad, LerpSmall>(w[i], g[i], mi, vi, Amsgrad ? vmax[i] : unused, s);
    m[i] = mi;
    v[i] = vi;
  }
}

template <class C>
using AdamCore = void (*)(C*, const C*, C*, C*, C*, int64_t, const AdamScalars<C>&);

template <class C, int Mode, bool Amsgrad>
AdamCore<C> pick_adam(bool lerp_small) {
  return lerp_small ? &adam_core<C, Mode, Amsgrad, true> : &adam_core<C, Mode, Amsgrad, false>;
}

template <class C, int Mode>
AdamCore<C> pick_adam(bool amsgrad, bool lerp_small) {
  return amsgrad ? pick_adam<C, Mode, true>(lerp_small) : pick_adam<C, Mode, false>(lerp_small);
}

template <class C>
void adam_typed(const Tensor& weight, const Tensor& grad, const Tensor& m, const Tensor& v, const Tensor& vmax,
                const Tensor& half_out, const AdamArgs& a) {
  const AdamScalars<C> s = adam_scalars<C>(a);
  AdamCore<C> core = s.mode == 0   ? pick_adam<C, 0>(s.amsgrad, s.lerp_small)
                     : s.mode == 1 ? pick_adam<C, 1>(s.amsgrad, s.lerp_small)
                                   : pick_adam<C, 2>(s.amsgrad, s.lerp_small);

  const DType cd = dtype_of<C>::value;
  const bool direct = weight.dtype() == cd && grad.dtype() == cd && !half_out.defined();
  parallel_for(weight.numel(), kGrain, [&](int64_t begin, int64_t end) {
    if (direct) {
      C* vm = a.amsgrad ? static_cast<C*>(vmax.raw_data()) + begin : nullptr;
      core(static_cast<C*>(weight.raw_data()) + begin, static_cast<const C*>(grad.raw_data()) + begin,
           static_cast<C*>(m.raw_data()) + begin, static_cast<C*>(v.raw_data()) + begin, vm, end - begin, s);
      return;
    }
    C tw[kBlock], tg[kBlock], tm[kBlock], tv[kBlock], tx[kBlock];
    for (int64_t b = begin; b < end; b += kBlock) {
      const int64_t n = std::min(kBlock, end - b);
      C* pw = view_block(weight, b, n, tw);
      const C* pg = view_block(grad, b, n, tg);
      C* pm = view_block(m, b, n, tm);
      C* pv = view_block(v, b, n, tv);
      C* px = a.amsgrad ? view_block(vmax, b, n, tx) : nullptr;
      core(pw, pg, pm, pv, px, n, s);
      store_block(weight, b, n, pw);
      store_block(m, b, n, pm);
      store_block(v, b, n, pv);
      if (a.amsgrad) store_block(vmax, b, n, px);
      if (half_out.defined()) store_block(half_out, b, n, pw);
    }
  });
}

// ---- SGD --------------------------------------------------------------------------------------

template <class C, bool WeightDecay, int Mom, bool Nesterov>
MT_CLONES_AVX2 void sgd_core(C* w, const C* g, C* buf, int64_t n, const SgdScalars<C>& scalars) {
  const SgdScalars<C> s = scalars;  // local: see adam_core
  C unused = C(0);  // buf's stand-in without momentum
  for (int64_t i = 0; i < n; ++i) w[i] = sgd_update<WeightDecay, Mom, Nesterov>(w[i], g[i], Mom != 0 ? buf[i] : unused, s);
}

template <class C>
using SgdCore = void (*)(C*, const C*, C*, int64_t, const SgdScalars<C>&);

template <class C, bool WeightDecay>
SgdCore<C> pick_sgd(int mom, bool nesterov) {
  if (mom == 0) return &sgd_core<C, WeightDecay, 0, false>;
  if (mom == 1) return nesterov ? &sgd_core<C, WeightDecay, 1, true> : &sgd_core<C, WeightDecay, 1, false>;
  return nesterov ? &sgd_core<C, WeightDecay, 2, true> : &sgd_core<C, WeightDecay, 2, false>;
}

template <class C>
void sgd_typed(const Tensor& weight, const Tensor& grad, const Tensor& buf, const Tensor& half_out,
               const SgdArgs& a) {
  const SgdScalars<C> s = sgd_scalars<C>(a);
  const int mom = s.mom;
  SgdCore<C> core = s.weight_decay ? pick_sgd<C, true>(mom, s.nesterov) : pick_sgd<C, false>(mom, s.nesterov);

  const DType cd = dtype_of<C>::value;
  const bool direct = weight.dtype() == cd && grad.dtype() == cd && !half_out.defined();
  parallel_for(weight.numel(), kGrain, [&](int64_t begin, int64_t end) {
    if (direct) {
      C* pb = mom ? static_cast<C*>(buf.raw_data()) + begin : nullptr;
      core(static_cast<C*>(weight.raw_data()) + begin, static_cast<const C*>(grad.raw_data()) + begin, pb,
           end - begin, s);
      return;
    }
    C tw[kBlock], tg[kBlock], tb[kBlock];
    for (int64_t b = begin; b < end; b += kBlock) {
      const int64_t n = std::min(kBlock, end - b);
      C* pw = view_block(weight, b, n, tw);
      const C* pg = view_block(grad, b, n, tg);
      C* pb = mom ? view_block(buf, b, n, tb) : nullptr;
      core(pw, pg, pb, n, s);
      store_block(weight, b, n, pw);
      if (mom) store_block(buf, b, n, pb);
      if (half_out.defined()) store_block(half_out, b, n, pw);
    }
  });
}

// On the CPU the gate's flag is read in place. Returns whether the update is skipped; otherwise
// corrects `step` by the skips counted so far.
bool gate_closed(const StepGate& gate, int64_t& step) {
  if (!gate.skipped_steps.defined()) return false;
  int32_t& skipped = *gate.skipped_steps.data_ptr<int32_t>();
  if (gate.found_inf.defined() && *gate.found_inf.data_ptr<float>() != 0.0f) {
    ++skipped;
    return true;
  }
  step -= skipped;
  return false;
}

}  // namespace

void adam_step(const Tensor& weight, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                           const Tensor& max_exp_avg_sq, const Tensor& half_out, const AdamArgs& args,
                           const StepGate& gate) {
  AdamArgs a = args;
  if (gate_closed(gate, a.step)) return;
  if (weight.dtype() == kFloat64) {
    MT_CHECK(grad.dtype() == kFloat64, a.decoupled ? "AdamW" : "Adam", ".step: float64 weight with a ", grad.dtype(),
             " gradient");
    adam_typed<double>(weight, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, half_out, a);
  } else {
    adam_typed<float>(weight, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, half_out, a);
  }
}

void sgd_step(const Tensor& weight, const Tensor& grad, const Tensor& momentum_buffer,
                          const Tensor& half_out, const SgdArgs& args, const StepGate& gate) {
  SgdArgs a = args;
  if (gate_closed(gate, a.step)) return;
  if (weight.dtype() == kFloat64) {
    MT_CHECK(grad.dtype() == kFloat64, "SGD.step: float64 weight with a ", grad.dtype(), " gradient");
    sgd_typed<double>(weight, grad, momentum_buffer, half_out, a);
  } else {
    sgd_typed<float>(weight, grad, momentum_buffer, half_out, a);
  }
}

void register_optim() {
  backends::adam_step.set(DeviceType::CPU, adam_step);
  backends::sgd_step.set(DeviceType::CPU, sgd_step);
}

}  // namespace mixtrain::backends::cpu
