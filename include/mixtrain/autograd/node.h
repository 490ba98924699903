#pragma once
// The autograd graph: each differentiable op call records a Node whose edges point at the nodes
// that produced its inputs (or at the accumulator of a leaf). Backward formulas are closures
// written with mixtrain ops; their captured SavedTensors are the saved tensors, checked against
// in-place changes when read and freed as soon as the node has run. The engine that runs the
// graph backward sits above the ops layer: engine/engine.h.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "mixtrain/core/tensor.h"

namespace mixtrain::autograd {

using TensorList = std::vector<Tensor>;

class Node;

struct Edge {
  std::shared_ptr<Node> node;
  uint32_t input_nr = 0;
  bool valid() const { return node != nullptr; }
};

// What the engine needs to know about each input a node returns a gradient for.
struct InputMeta {
  Shape shape;
  DType dtype = DType::Float32;
  Device device;
};

class Node {
 public:
  Node();
  virtual ~Node() = default;
  // Gradients w.r.t. the node's outputs in, gradients w.r.t. its inputs out (undefined = zero).
  virtual TensorList apply(TensorList&& grad_outputs) = 0;
  virtual const char* name() const = 0;
  // Drops saved tensors; called by the engine once the node has run.
  virtual void release_saved() {}

  std::vector<Edge> next_edges;
  std::vector<InputMeta> input_meta;
  uint32_t num_outputs = 1;
  uint64_t sequence_nr;  // later nodes run first
  // The memory version of each output when the node was recorded (empty: not tracked). An output
  // whose memory moved since, without an in-place op re-recording it (its base or a sibling view
  // was written in place), no longer holds what this node computed: using it as an input raises.
  std::vector<uint64_t> output_versions;
};

using BackwardFn = std::function<TensorList(const TensorList& grad_outputs)>;

// A node whose backward is a closure; the closure (and what it captured) dies after one run.
class FunctionNode : public Node {
 public:
  FunctionNode(const char* name, BackwardFn fn) : name_(name), fn_(std::move(fn)) {}
  TensorList apply(TensorList&& grad_outputs) override;
  const char* name() const override { return name_; }
  void release_saved() override { fn_ = nullptr; }

 private:
  const char* name_;
  BackwardFn fn_;
};

// Accumulates the incoming gradient into a leaf tensor's grad.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {}
  TensorList apply(TensorList&& grad_outputs) override;
  const char* name() const override { return "AccumulateGrad"; }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

// True when grad mode is on and any input requires grad.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
bool needs_grad(const std::vector<Tensor>& inputs);

// Records `fn` as the backward of an op with these inputs and outputs, if needs_grad(inputs).
// fn receives one gradient per output and returns one per input (undefined where none).
void record(const char* name, const std::vector<Tensor*>& outputs, const std::vector<const Tensor*>& inputs,
            BackwardFn fn);
// As record, whatever the inputs and the grad mode: for nn::checkpoint, whose region's parameters
// (not its inputs) may be all that needs a gradient.
void record_always(const char* name, const std::vector<Tensor*>& outputs, const std::vector<const Tensor*>& inputs,
                   BackwardFn fn);
inline void record(const char* name, Tensor& output, std::initializer_list<const Tensor*> inputs, BackwardFn fn) {
  record(name, std::vector<Tensor*>{&output}, std::vector<const Tensor*>(inputs), std::move(fn));
}

// For an in-place op about to write `self` (relu_, add_, dropout_): raises PyTorch's errors for a
// leaf that requires grad (under grad mode) and for a tensor whose graph is stale. After writing,
// the op bumps the version and records itself with self as both an input and the output, which
// rebases self's grad_fn onto the in-place op.
void check_inplace_autograd(const char* op, const Tensor& self);

// A tensor saved for backward: a handle to its data with no history (saving an op's own output
// makes no reference cycle through its grad_fn), plus the version of its memory when saved.
// Reading it in backward checks that no in-place write (an optimizer step, mul_, copy_, ... on it
// or on any view of its memory) happened since: such a write would silently give wrong gradients,
// so it raises PyTorch's "modified by an inplace operation" Error naming the node and the tensor.
// Every tensor a backward closure reads that the caller could write (inputs, outputs, views of
// them) is captured as a SavedTensor; private intermediates (statistics, indices) need not be.
class SavedTensor {
 public:
  SavedTensor() = default;
  // role says which tensor of the op it is, for the error ("input 1 (weight)", "output 0").
  SavedTensor(const Tensor& t, const char* role)
      : data_(t.defined() ? t.detach() : Tensor()), version_(t.defined() ? t.version() : 0), role_(role) {}
  bool defined() const { return data_.defined(); }
  // The data, after checking that its version is the one it was saved at.
  const Tensor& unpack() const;
  operator const Tensor&() const { return unpack(); }  // NOLINT: reads like the tensor in formulas

 private:
  Tensor data_;
  uint64_t version_ = 0;
  const char* role_ = "";
};

inline SavedTensor saved(const Tensor& t, const char* role) { return SavedTensor(t, role); }

}  // namespace mixtrain::autograd
