// The backward engine: counts dependencies over the graph reachable from the roots, then runs
// nodes in an order where each node sees the sum of all gradients flowing into it. Saved tensors
// are dropped as soon as their node has run, so activations are released during backward.
#include "mixtrain/engine/engine.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "mixtrain/base/error.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/memory/trace.h"
#include "mixtrain/ops/dispatch.h"
#include "mixtrain/ops/functional.h"

namespace mixtrain::autograd {

namespace {

struct LaterFirst {
  bool operator()(const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) const {
    return a->sequence_nr < b->sequence_nr;
  }
};

Edge root_edge(const Tensor& root) {
  if (root.grad_fn()) return {root.grad_fn(), root.impl()->output_nr};
  // A leaf root: build the accumulator through a trivial record so it is shared with the graph.
  auto acc = root.impl()->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(root.impl());
    acc->input_meta.push_back({root.shape(), root.dtype(), root.device()});
    root.impl()->grad_accumulator = acc;
  }
  return {acc, 0};
}

Tensor checked_gradient(const Node& node, size_t index, Tensor grad) {
  const InputMeta& meta = node.input_meta[index];
  MT_CHECK(grad.shape() == meta.shape, "backward of ", node.name(), ": gradient for input ", index, " has shape ",
           shape_str(grad.shape()), " but the input has shape ", shape_str(meta.shape));
  MT_CHECK(grad.device() == meta.device, "backward of ", node.name(), ": gradient for input ", index, " is on ",
           grad.device(), " but the input is on ", meta.device);
  if (grad.dtype() != meta.dtype) grad = grad.to(meta.dtype);
  return grad;
}

}  // namespace

// Here rather than with the graph (node.cpp): accumulating runs ops (clone, add_), and the graph
// sits below the ops layer.
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
    memory::tag_role(leaf_->grad->storage.get(), leaf_->grad->device, memory::Role::Gradient);
  }
  if (!leaf_->post_accumulate_grad_hooks.empty()) {
    const Tensor leaf(leaf_);
    // A copy: a hook may remove itself.
    const auto hooks = leaf_->post_accumulate_grad_hooks;
    for (const auto& [id, hook] : hooks) hook(leaf);
  }
  return {};
}

namespace {
// While a dry run records, what a node's backward allocates and frees is charged to the node.
class NodeLabel {
 public:
  explicit NodeLabel(const Node& node) : on_(memory::recording()) {
    if (on_) prev_ = memory::detail::push_op_label(node.name(), true);
  }
  ~NodeLabel() {
    if (on_) memory::detail::pop_op_label(prev_);
  }
  NodeLabel(const NodeLabel&) = delete;
  NodeLabel& operator=(const NodeLabel&) = delete;

 private:
  bool on_;
  const char* prev_ = nullptr;
};
}  // namespace

void run_backward(const TensorList& roots, const TensorList& grads) {
  MT_CHECK(roots.size() == grads.size(), "backward: ", roots.size(), " roots but ", grads.size(), " gradients");
  NoGradGuard no_grad;
  ops::HookExcludeGuard no_autocast;
  memory::PhaseScope backward_phase(memory::Phase::Backward);

  std::vector<std::pair<Edge, Tensor>> starts;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    MT_CHECK(root.defined(), "backward: undefined tensor");
    MT_CHECK(root.requires_grad(), "backward: ", root.summary(),
             " does not require grad and has no grad_fn (was it computed under NoGradGuard or from tensors "
             "that do not require grad?)");
    Tensor g = grads[i];
    if (!g.defined()) {
      MT_CHECK(root.numel() == 1, "backward: a gradient can be created implicitly only for scalar outputs, but ",
               "the tensor has shape ", shape_str(root.shape()), "; pass a gradient of that shape");
      g = ones(root.shape(), root.options());
    } else {
      MT_CHECK(g.shape() == root.shape(), "backward: gradient of shape ", shape_str(g.shape()),
               " does not match the tensor's shape ", shape_str(root.shape()));
      if (g.dtype() != root.dtype()) g = g.to(root.dtype());
    }
    starts.emplace_back(root_edge(root), g);
  }

  // Dependency counts over the reachable graph.
  std::unordered_map<Node*, int> dependencies;
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack;
  for (auto& [edge, g] : starts) {
    if (seen.insert(edge.node.get()).second) stack.push_back(edge.node.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.valid()) continue;
      ++dependencies[e.node.get()];
      if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }

  std::unordered_map<Node*, TensorList> buffers;
  auto accumulate = [&](const Edge& e, Tensor g) {
    TensorList& buf = buffers[e.node.get()];
    if (buf.size() < e.node->num_outputs) buf.resize(e.node->num_outputs);
    Tensor& slot = buf[e.input_nr];
    slot = slot.defined() ? add(slot, g) : std::move(g);
  };

  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, LaterFirst> ready;
  std::unordered_set<Node*> queued;
  for (auto& [edge, g] : starts) accumulate(edge, g);
  for (auto& [edge, g] : starts) {
    if (dependencies[edge.node.get()] == 0 && queued.insert(edge.node.get()).second) ready.push(edge.node);
  }

  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    const NodeLabel label(*node);
    TensorList inputs = std::move(buffers[node.get()]);
    buffers.erase(node.get());
    inputs.resize(node->num_outputs);
    TensorList outputs = node->apply(std::move(inputs));
    node->release_saved();
    MT_CHECK(outputs.size() == node->next_edges.size() || node->next_edges.empty(), "backward of ", node->name(),
             ": returned ", outputs.size(), " gradients for ", node->next_edges.size(), " inputs");
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.valid()) continue;
      if (outputs[i].defined()) accumulate(e, checked_gradient(*node, i, std::move(outputs[i])));
      if (--dependencies[e.node.get()] == 0) ready.push(e.node);
    }
  }
}

}  // namespace mixtrain::autograd

namespace mixtrain {

void Tensor::backward() const { autograd::run_backward({*this}, {Tensor()}); }
void Tensor::backward(const Tensor& gradient) const { autograd::run_backward({*this}, {gradient}); }

}  // namespace mixtrain
