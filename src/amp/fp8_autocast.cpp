// The FP8 autocast scope (amp/fp8.h): the thread's FP8 state, the hook through which nn::Linear
// runs fp8_linear, and the per-scope cache of the weights' fp8 copies.
#include <memory>
#include <mutex>
#include <vector>

#include "amp/autocast_internal.h"
#include "mixtrain/amp/fp8.h"
#include "mixtrain/base/error.h"
#include "mixtrain/memory/trace.h"
#include "mixtrain/ops/dispatch.h"
#include "mixtrain/ops/fp8.h"
#include "nn/linear_fp8_hook.h"

namespace mixtrain::amp {

namespace {

// A weight's fp8 copy, valid while the weight's memory and the layer's scales are unchanged: an
// optimizer step (a version bump) or an update() (a new generation) inside the scope makes it stale.
struct CachedWeight {
  const nn::LinearImpl* layer = nullptr;
  std::weak_ptr<TensorImpl> weight;
  uint64_t version = 0;
  int64_t generation = 0;
  Float8Tensor cast;
};

struct Fp8ThreadState {
  std::array<bool, kNumDeviceTypes> enabled{};
  std::shared_ptr<const Fp8Recipe> recipe;
  int nesting = 0;
  std::vector<CachedWeight> cache;  // in the order the casts were made (and are released)
};

Fp8ThreadState& thread_state() {
  thread_local Fp8ThreadState s;
  return s;
}

Fp8LinearConfig config_of(const Fp8Recipe& r) {
  Fp8LinearConfig c;
  c.forward_dtype = kFloat8E4M3FN;
  c.backward_dtype = r.format() == Fp8Format::Hybrid ? kFloat8E5M2 : kFloat8E4M3FN;
  c.current_scaling = r.scaling() == Fp8ScalingMode::Current;
  c.margin = r.margin();
  c.out_dtype = r.dtype();
  return c;
}

void tag_state(const nn::LinearFp8State& st) {
  for (const Tensor* t : {&st.amax_history, &st.scale, &st.scale_inv, &st.saturated})
    memory::tag_role(t->impl()->storage.get(), t->device(), memory::Role::Fp8State);
}

Float8Tensor cached_weight(Fp8ThreadState& s, const nn::LinearImpl& layer, const Fp8LinearState& state,
                           const Fp8LinearConfig& config) {
  const nn::LinearFp8State& st = *layer.fp8_state();
  for (auto it = s.cache.begin(); it != s.cache.end(); ++it) {
    if (it->layer != &layer) continue;
    const std::shared_ptr<TensorImpl> w = it->weight.lock();
    if (w == layer.weight.impl() && it->version == layer.weight.version() && it->generation == st.generation)
      return it->cast;
    s.cache.erase(it);  // stale
    break;
  }
  CachedWeight e{&layer, layer.weight.impl(), layer.weight.version(), st.generation,
                 fp8_cast_weight(layer.weight, state, config)};
  s.cache.push_back(e);
  return e.cast;
}

// The bias in the product's output dtype, through autocast's weight cache (the bias is an fp32
// parameter: one cast per scope, its gradient back in fp32).
Tensor bias_for(const Tensor& bias, DType dtype) {
  if (!bias.defined() || bias.dtype() == dtype) return bias;
  const TensorImpl& impl = *bias.impl();
  if (is_autocast_cache_enabled() && impl.dtype == kFloat32 && impl.requires_grad && impl.grad_fn == nullptr &&
      !impl.is_view)
    return detail::cached_cast(bias, dtype);
  return bias.to(dtype);
}

Tensor fp8_linear_hook(nn::LinearImpl& layer, const Tensor& input) {
  Fp8ThreadState& s = thread_state();
  if (s.nesting == 0 || !s.recipe || !input.defined()) return Tensor();
  if (!s.enabled[detail::autocast_index(input.device().type)]) return Tensor();
  const Fp8Recipe& r = *s.recipe;
  nn::LinearFp8State& st = *layer.fp8_state();
  MT_CHECK(st.amax_history.size(0) == r.history_rows(), "Fp8AutocastGuard: a Linear(",
           layer.options().in_features(), ", ", layer.options().out_features(), ") has FP8 state for ",
           st.amax_history.size(0), " history rows, but the scope's recipe (", fp8_scaling_name(r.scaling()),
           " scaling, history_len ", r.history_len(), ") keeps ", r.history_rows(),
           "; use the recipe the model's amp::Fp8Scaling was made with");
  if (st.saturated.device() != layer.weight.device()) st.saturated = st.saturated.to(layer.weight.device());
  tag_state(st);
  const Fp8LinearConfig config = config_of(r);
  Fp8LinearState state;
  state.scale = st.scale;
  state.scale_inv = st.scale_inv;
  state.amax = st.amax_history.select(0, 0);
  state.saturated = st.saturated;
  state.weight = cached_weight(s, layer, state, config);
  Tensor bias;
  {
    ops::HookExcludeGuard no_reentry;  // the bias cast is autocast's, made here
    bias = bias_for(layer.bias, config.out_dtype);
  }
  return fp8_linear(input, layer.weight, bias, state, config);
}

void install_hook_once() {
  static std::once_flag once;
  std::call_once(once, [] { nn::detail::set_linear_fp8_hook(&fp8_linear_hook); });
}

}  // namespace

Fp8AutocastGuard::Fp8AutocastGuard(DeviceType device, const Fp8Recipe& recipe, bool enabled)
    : device_(device), autocast_(device, recipe.dtype(), enabled) {
  recipe.validate();
  install_hook_once();
  Fp8ThreadState& s = thread_state();
  const int i = detail::device_index(device);
  prev_enabled_ = s.enabled[i];
  prev_recipe_ = s.recipe;
  s.enabled[i] = enabled;
  s.recipe = std::make_shared<const Fp8Recipe>(recipe);
  ++s.nesting;
}

Fp8AutocastGuard::~Fp8AutocastGuard() {
  Fp8ThreadState& s = thread_state();
  s.enabled[detail::device_index(device_)] = prev_enabled_;
  s.recipe = prev_recipe_;
  if (--s.nesting == 0) {
    // Released in the order they were made, as autocast's cache: every step frees alike.
    std::vector<CachedWeight> dropped;
    dropped.swap(s.cache);
    for (CachedWeight& e : dropped) e.cast = Float8Tensor();
  }
}

bool is_fp8_autocast_enabled(DeviceType device) {
  const Fp8ThreadState& s = thread_state();
  return s.nesting > 0 && s.enabled[detail::device_index(device)];
}

}  // namespace mixtrain::amp
