#include "mixtrain/autograd/node.h"

#include <atomic>

#include "mixtrain/autograd/grad_mode.h"
#include "mixtrain/core/error.h"
#include "mixtrain/ops/functional.h"

namespace mixtrain::autograd {

namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};

// The edge a gradient for `t` flows along: its producer, or its leaf accumulator.
Edge gradient_edge(const Tensor& t) {
  const auto& impl = t.impl();
  if (impl->grad_fn) return {impl->grad_fn, impl->output_nr};
  if (!impl->requires_grad) return {};
  auto acc = impl->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(impl);
    acc->input_meta.push_back({impl->shape, impl->dtype, impl->device});
    impl->grad_accumulator = acc;
  }
  return {acc, 0};
}
}  // namespace

Node::Node() : sequence_nr(g_next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

TensorList FunctionNode::apply(TensorList&& grad_outputs) {
  MT_CHECK(fn_ != nullptr, name_, ": trying to run backward through the graph a second time; the ",
           "saved tensors were freed after the first backward");
  return fn_(grad_outputs);
}

TensorList AccumulateGrad::apply(TensorList&& grad_outputs) {
  Tensor g = std::move(grad_outputs.at(0));
  if (!g.defined()) return {};
  // The incoming gradient may share storage with another leaf's (add's backward passes one
  // tensor to both inputs); the scaler and optimizers update grads in place, so own it.
  if (g.impl()->storage.use_count() > 1 || !g.is_contiguous()) g = g.detach().clone();
  Tensor existing = leaf_->grad ? Tensor(leaf_->grad) : Tensor();
  if (existing.defined()) {
    existing.add_(g);
  } else {
    leaf_->grad = g.detach().impl();
  }
  if (!leaf_->post_accumulate_grad_hooks.empty()) {
    const Tensor leaf(leaf_);
    // A copy: a hook may remove itself.
    const auto hooks = leaf_->post_accumulate_grad_hooks;
    for (const auto& [id, hook] : hooks) hook(leaf);
  }
  return {};
}

}  // namespace mixtrain::autograd

namespace mixtrain {

uint64_t Tensor::register_post_accumulate_grad_hook(PostAccumulateGradHook hook) {
  static std::atomic<uint64_t> next_id{1};
  MT_CHECK(defined() && is_leaf() && requires_grad(),
           "register_post_accumulate_grad_hook: only a leaf tensor that requires grad accumulates a gradient");
  const uint64_t id = next_id.fetch_add(1, std::memory_order_relaxed);
  impl_->post_accumulate_grad_hooks.emplace_back(id, std::move(hook));
  return id;
}

void Tensor::remove_post_accumulate_grad_hook(uint64_t id) {
  if (!defined()) return;
  auto& hooks = impl_->post_accumulate_grad_hooks;
  for (auto it = hooks.begin(); it != hooks.end(); ++it)
    if (it->first == id) {
      hooks.erase(it);
      return;
    }
}

}  // namespace mixtrain

namespace mixtrain::autograd {

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!is_grad_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!is_grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void record(const char* name, const std::vector<Tensor*>& outputs, const std::vector<const Tensor*>& inputs,
            BackwardFn fn) {
  if (!is_grad_enabled()) return;
  bool any = false;
  for (const Tensor* t : inputs) any = any || (t && t->defined() && t->requires_grad());
  if (!any) return;
  auto node = std::make_shared<FunctionNode>(name, std::move(fn));
  node->next_edges.reserve(inputs.size());
  node->input_meta.reserve(inputs.size());
  for (const Tensor* t : inputs) {
    if (t && t->defined()) {
      node->next_edges.push_back(t->requires_grad() ? gradient_edge(*t) : Edge{});
      node->input_meta.push_back({t->shape(), t->dtype(), t->device()});
    } else {
      node->next_edges.push_back({});
      node->input_meta.push_back({});
    }
  }
  node->num_outputs = static_cast<uint32_t>(outputs.size());
  for (uint32_t i = 0; i < outputs.size(); ++i) {
    auto& impl = outputs[i]->impl();
    impl->requires_grad = true;
    impl->grad_fn = node;
    impl->output_nr = i;
  }
}

}  // namespace mixtrain::autograd
