// nn::checkpoint (recompute.h): a forward under NoGradGuard recorded as one autograd node whose
// backward recomputes the region under the forward's autocast and generator state and
// backpropagates through the recomputation with a nested backward (the engine is reentrant: its
// state is local to each run_backward call).
#include "mixtrain/amp/recompute.h"

#include "mixtrain/amp/custom_op.h"
#include "mixtrain/autograd/node.h"
#include "mixtrain/base/error.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/base/rng.h"
#include "mixtrain/engine/engine.h"

namespace mixtrain::nn {

namespace {

// Sets the default generator to `state` for the scope and puts back the state it had before, so
// the recomputation draws the forward's numbers and the draws after backward are unaffected.
class GeneratorStateGuard {
 public:
  explicit GeneratorStateGuard(const GeneratorState& state) : prev_(default_generator().state()) {
    default_generator().set_state(state);
  }
  ~GeneratorStateGuard() { default_generator().set_state(prev_); }
  GeneratorStateGuard(const GeneratorStateGuard&) = delete;
  GeneratorStateGuard& operator=(const GeneratorStateGuard&) = delete;

 private:
  GeneratorState prev_;
};

void check_outputs(const std::vector<Tensor>& outputs) {
  MT_CHECK(!outputs.empty(), "checkpoint: the function returned no tensors");
  for (size_t i = 0; i < outputs.size(); ++i)
    MT_CHECK(outputs[i].defined() && is_floating(outputs[i].dtype()), "checkpoint: output ", i, " is ",
             outputs[i].defined() ? outputs[i].summary() : std::string("undefined"),
             "; a checkpointed function must return defined floating tensors");
}

}  // namespace

std::vector<Tensor> checkpoint(CheckpointFn fn, const std::vector<Tensor>& inputs) {
  MT_CHECK(fn != nullptr, "checkpoint: no function given");
  if (!autograd::is_grad_enabled()) return fn(inputs);

  const amp::AutocastState autocast = amp::AutocastState::current();
  const GeneratorState rng = default_generator().state();
  std::vector<Tensor> outputs;
  {
    NoGradGuard no_grad;
    outputs = fn(inputs);
  }
  check_outputs(outputs);
  // New handles: an output that is an input (or shares its TensorImpl) must not have the input's
  // history replaced by this node.
  for (Tensor& out : outputs) out = out.detach();

  std::vector<autograd::SavedTensor> saved;
  std::vector<bool> wants_grad;
  std::vector<const Tensor*> input_ptrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    saved.emplace_back(inputs[i], "checkpoint input");
    wants_grad.push_back(inputs[i].defined() && inputs[i].requires_grad());
    input_ptrs.push_back(&inputs[i]);
  }
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (const Tensor& out : outputs) {
    shapes.push_back(out.shape());
    dtypes.push_back(out.dtype());
  }
  std::vector<Tensor*> output_ptrs;
  for (Tensor& out : outputs) output_ptrs.push_back(&out);

  autograd::record_always(
      "CheckpointBackward0", output_ptrs, input_ptrs,
      [fn, saved, wants_grad, autocast, rng, shapes, dtypes](const autograd::TensorList& grads) {
        std::vector<Tensor> in;
        for (size_t i = 0; i < saved.size(); ++i) {
          Tensor t = saved[i].defined() ? saved[i].unpack().detach() : Tensor();
          if (wants_grad[i]) t.set_requires_grad(true);
          in.push_back(t);
        }
        std::vector<Tensor> recomputed;
        {
          AutoGradMode grad_on(true);
          amp::AutocastStateGuard autocast_guard(autocast);
          GeneratorStateGuard rng_guard(rng);
          CheckpointRecomputeGuard recompute;
          recomputed = fn(in);
        }
        MT_CHECK(recomputed.size() == shapes.size(), "checkpoint: the function returned ", shapes.size(),
                 " tensors in forward but ", recomputed.size(), " when recomputed in backward; it must be pure");
        autograd::TensorList roots, root_grads;
        for (size_t i = 0; i < recomputed.size(); ++i) {
          const Tensor& r = recomputed[i];
          MT_CHECK(r.defined() && r.shape() == shapes[i] && r.dtype() == dtypes[i], "checkpoint: output ", i,
                   " was ", shape_str(shapes[i]), " ", dtypes[i], " in forward but ",
                   r.defined() ? r.summary() : std::string("undefined"),
                   " when recomputed in backward; the function must be pure");
          if (i < grads.size() && grads[i].defined() && r.requires_grad()) {
            roots.push_back(r);
            root_grads.push_back(grads[i]);
          }
        }
        if (!roots.empty()) autograd::run_backward(roots, root_grads);
        autograd::TensorList input_grads(in.size());
        for (size_t i = 0; i < in.size(); ++i)
          if (wants_grad[i]) input_grads[i] = in[i].grad();
        return input_grads;
      });
  return outputs;
}

}  // namespace mixtrain::nn
