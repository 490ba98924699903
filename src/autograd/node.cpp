#include "mixtrain/autograd/node.h"

#include <algorithm>
#include <atomic>

#include "mixtrain/base/error.h"
#include "mixtrain/base/grad_mode.h"

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

// The node whose closure this thread is running, for SavedTensor's error.
thread_local const char* t_running_node = nullptr;

struct RunningNode {
  explicit RunningNode(const char* name) : previous(t_running_node) { t_running_node = name; }
  ~RunningNode() { t_running_node = previous; }
  const char* previous;
};
// A tensor the graph still describes: its producer's recorded version is its memory's version.
void check_current(const char* op, const Tensor& t) {
  const auto& impl = t.impl();
  if (!impl->grad_fn || impl->grad_fn->output_versions.size() <= impl->output_nr) return;
  const uint64_t recorded = impl->grad_fn->output_versions[impl->output_nr];
  MT_CHECK(recorded == t.version(), op, ": output ", impl->output_nr, " of ", impl->grad_fn->name(), " ", t.summary(),
           " was modified by an inplace operation that autograd did not record (one under NoGradGuard, or one on a ",
           "view of it or on the tensor it views): its memory is at version ", t.version(),
           " but its history was recorded at version ", recorded, ", so its gradient would be wrong. Apply ",
           "the in-place op to the tensor itself with grad mode on, or change a clone.");
}
}  // namespace

void check_inplace_autograd(const char* op, const Tensor& self) {
  if (!is_grad_enabled() || !self.requires_grad()) return;
  MT_CHECK(!self.is_leaf(), op, ": a leaf Variable that requires grad is being used in an in-place operation (",
           self.summary(), "); run it under NoGradGuard or use the out-of-place op");
  check_current(op, self);
}

Node::Node() : sequence_nr(g_next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

const Tensor& SavedTensor::unpack() const {
  if (data_.defined() && data_.version() != version_) {
    MT_ERROR(t_running_node ? t_running_node : "backward", ": one of the variables needed for gradient computation ",
             "has been modified by an inplace operation: ", role_, " ", data_.summary(), " is at version ",
             data_.version(), "; expected version ", version_, " instead. It was saved for backward and written in ",
             "place afterwards (an optimizer step, mul_/add_/copy_/fill_ on it or on a view of it); run backward ",
             "before changing it, or change a clone.");
  }
  return data_;
}

TensorList FunctionNode::apply(TensorList&& grad_outputs) {
  MT_CHECK(fn_ != nullptr, name_, ": trying to run backward through the graph a second time; the ",
           "saved tensors were freed after the first backward");
  RunningNode running(name_);
  return fn_(grad_outputs);
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
  record_always(name, outputs, inputs, std::move(fn));
}

void record_always(const char* name, const std::vector<Tensor*>& outputs, const std::vector<const Tensor*>& inputs,
                   BackwardFn fn) {
  auto node = std::make_shared<FunctionNode>(name, std::move(fn));
  node->next_edges.reserve(inputs.size());
  node->input_meta.reserve(inputs.size());
  for (const Tensor* t : inputs) {
    if (t && t->defined()) {
      // An in-place op's self is also its output: it checked self before writing it.
      const bool is_output = std::any_of(outputs.begin(), outputs.end(),
                                         [t](const Tensor* o) { return o->impl() == t->impl(); });
      if (t->requires_grad() && !is_output) check_current(name, *t);
      node->next_edges.push_back(t->requires_grad() ? gradient_edge(*t) : Edge{});
      node->input_meta.push_back({t->shape(), t->dtype(), t->device()});
    } else {
      node->next_edges.push_back({});
      node->input_meta.push_back({});
    }
  }
  node->num_outputs = static_cast<uint32_t>(outputs.size());
  node->output_versions.reserve(outputs.size());
  for (uint32_t i = 0; i < outputs.size(); ++i) {
    auto& impl = outputs[i]->impl();
    node->output_versions.push_back(outputs[i]->version());
    impl->requires_grad = true;
    impl->grad_fn = node;
    impl->output_nr = i;
  }
}

}  // namespace mixtrain::autograd
