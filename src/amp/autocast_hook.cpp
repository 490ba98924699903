// The pre-dispatch hook autocast installs: applies the op's cast policy to the op's tensor
// arguments before the op records autograd and runs its kernel (docs/AUTOCAST.md).
#include <mutex>
#include <sstream>
#include <string>

#include "amp/autocast_internal.h"
#include "mixtrain/base/error.h"
#include "mixtrain/ops/dispatch.h"

namespace mixtrain::amp {

namespace detail {

namespace {

using ops::DispatchArgs;

bool on_autocast_device(const ThreadState& s, const Tensor& t) {
  return t.defined() && s.enabled[autocast_index(t.device().type)];
}

// PyTorch's rule: floating, not fp64, on a device type whose autocast is on. Integer, bool and
// fp64 tensors, and tensors of other device types, are never cast; nor are fp8 ones (scaled data,
// meaningless without their scale), where PyTorch would widen them.
bool eligible(const ThreadState& s, const Tensor& t) {
  return on_autocast_device(s, t) && is_floating(t.dtype()) && t.dtype() != kFloat64 && !is_float8(t.dtype());
}

// Only the low-precision casts of fp32 parameters are cached: activations change every call,
// fp32 casts are of activations, and views (w.t()) were a leak in PyTorch (#48049).
bool cacheable(const ThreadState& s, const Tensor& t, DType to) {
  const TensorImpl& impl = *t.impl();
  return s.cache_enabled && to == s.dtype[autocast_index(impl.device.type)] && impl.dtype == kFloat32 &&
         impl.requires_grad && impl.grad_fn == nullptr && !impl.is_view;
}

// A differentiable cast, recorded in autograd before the op, so the op's backward runs in the
// dtype it ran in and the cast's backward returns the gradient in the input's dtype.
void cast_to(const ThreadState& s, Tensor& t, DType to) {
  if (t.dtype() == to) return;
  if (cacheable(s, t, to)) {
    t = cached_cast(t, to);
    return;
  }
  t = t.to(to);
  count_cast(t);
}

std::string describe_inputs(const DispatchArgs& args) {
  std::ostringstream os;
  bool first = true;
  for (int i = 0; i < args.num_tensors; ++i) {
    const Tensor& t = *args.tensors[i];
    if (!t.defined()) continue;
    os << (first ? "" : ", ") << shape_str(t.shape()) << ' ' << t.dtype() << ' ' << t.device();
    first = false;
  }
  return os.str();
}

[[noreturn]] void throw_banned(const DispatchArgs& args) {
  const char* name = ops::op_name(args.op);
  if (args.op == ops::OpId::binary_cross_entropy) {
    MT_ERROR(name, ": unsafe to autocast (inputs ", describe_inputs(args),
             "): its backward can produce gradients that float16 cannot represent. Many models put a sigmoid "
             "right before binary_cross_entropy; combine the two with binary_cross_entropy_with_logits, which "
             "is safe to autocast. To run it anyway, call it with fp32 inputs inside "
             "amp::AutocastGuard(device, dtype, /*enabled=*/false).");
  }
  MT_ERROR(name, ": banned under autocast by the policy table (inputs ", describe_inputs(args),
           "); run it inside amp::AutocastGuard(device, dtype, /*enabled=*/false) or change its policy with "
           "amp::set_policy");
}

// The widest floating type among the eligible inputs. fp16 next to bf16 has no sensible answer
// (neither holds the other), so it is an error, as in PyTorch.
bool widest_eligible(const ThreadState& s, const DispatchArgs& args, DType* out) {
  bool f16 = false, bf16 = false, f32 = false;
  for (int i = 0; i < args.num_tensors; ++i) {
    const Tensor& t = *args.tensors[i];
    if (!eligible(s, t)) continue;
    f16 = f16 || t.dtype() == kFloat16;
    bf16 = bf16 || t.dtype() == kBFloat16;
    f32 = f32 || t.dtype() == kFloat32;
  }
  MT_CHECK(!(f16 && bf16), ops::op_name(args.op), ": autocast cannot promote float16 and bfloat16 inputs together (",
           describe_inputs(args), "); cast them to one dtype first");
  if (!(f16 || bf16 || f32)) return false;
  *out = f32 ? kFloat32 : f16 ? kFloat16 : kBFloat16;
  return true;
}

// The dtype the op computes in, once the casts are done: its dtype argument, else the promoted
// dtype of its tensor arguments.
DType compute_dtype(const DispatchArgs& args) {
  if (args.dtype && args.dtype->has_value()) return **args.dtype;
  bool any = false;
  DType d = kFloat32;
  for (int i = 0; i < args.num_tensors; ++i) {
    const Tensor& t = *args.tensors[i];
    if (!t.defined() || is_float8(t.dtype())) continue;  // fp8 promotes with nothing
    d = any ? promote_types(d, t.dtype()) : t.dtype();
    any = true;
  }
  return d;
}

void cast_eligible(const ThreadState& s, const DispatchArgs& args, DType to) {
  for (int i = 0; i < args.num_tensors; ++i) {
    Tensor& t = *args.tensors[i];
    if (eligible(s, t)) cast_to(s, t, to);
  }
}

void autocast_hook(DispatchArgs& args) {
  const ThreadState& s = thread_state();
  bool applies = false;
  for (int i = 0; i < args.num_tensors && !applies; ++i) applies = on_autocast_device(s, *args.tensors[i]);
  if (!applies) return;
  const CastPolicy policy = ops::policy(args.op);
  ops::HookExcludeGuard no_reentry;  // the casts below are ops too
  switch (policy) {
    case CastPolicy::LowerPrecision:
      for (int i = 0; i < args.num_tensors; ++i) {
        Tensor& t = *args.tensors[i];
        if (eligible(s, t)) cast_to(s, t, s.dtype[autocast_index(t.device().type)]);
      }
      break;
    case CastPolicy::Float32:
      cast_eligible(s, args, kFloat32);
      break;
    case CastPolicy::Float32OptDtype:
      if (args.dtype == nullptr) {
        // The policy was put on an op without a dtype argument (set_policy / JSON): the nearest
        // meaning is to compute in fp32, so cast as Float32 does.
        cast_eligible(s, args, kFloat32);
      } else if (args.num_tensors > 0 && eligible(s, *args.tensors[0]) && !args.dtype->has_value()) {
        // The op upcasts internally; a dtype the caller gave is kept (PyTorch: fp32_set_opt_dtype).
        *args.dtype = kFloat32;
      }
      break;
    case CastPolicy::Promote: {
      DType to;
      if (widest_eligible(s, args, &to)) cast_eligible(s, args, to);
      break;
    }
    case CastPolicy::Banned:
      throw_banned(args);
    case CastPolicy::Passthrough:
      break;
  }
  counters().ops[static_cast<int>(compute_dtype(args))][static_cast<int>(policy)].fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

void install_hook_once() {
  static std::once_flag once;
  std::call_once(once, [] { ops::set_pre_dispatch_hook(&autocast_hook); });
}

}  // namespace detail

}  // namespace mixtrain::amp
