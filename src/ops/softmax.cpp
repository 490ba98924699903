// softmax and log_softmax, and the causal softmax of attention scores (the mask applied inside
// the kernel).
#include "backends/softmax.h"
#include "ops/op_helpers.h"

namespace mixtrain {

using namespace ops;

namespace {

Tensor softmax_impl(OpId id, const Tensor& x_in, int64_t dim, std::optional<DType> dtype_in, int64_t causal_rows = 0) {
  Tensor x = x_in;
  std::optional<DType> dtype = dtype_in;
  const bool log = id == OpId::log_softmax;
  const char* name = op_name(id);
  OpScope scope(id, {&x}, &dtype);
  check_defined(name, x, "input");
  check_floating(name, x);
  if (dtype && *dtype != x.dtype()) x = x.to(*dtype);
  const int64_t d = wrap_dim(dim, x.dim(), name);
  Tensor xc = x.contiguous();
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < d; ++k) outer *= x.size(k);
  for (int64_t k = d + 1; k < x.dim(); ++k) inner *= x.size(k);
  const int64_t n = x.dim() == 0 ? 1 : x.size(d);
  Tensor out = new_empty(x.shape(), x);
  backends::softmax(x, xc, outer, n, inner, log, causal_rows, out);
  if (autograd::needs_grad({&x})) {
    const autograd::SavedTensor y = autograd::saved(out, "output 0");
    autograd::record(log ? "LogSoftmaxBackward0" : "SoftmaxBackward0", out, {&x}, [y, outer, n, inner, log](const TensorList& g) {
      Tensor gc = g[0].contiguous();
      Tensor gx = new_empty(gc.shape(), gc);
      backends::softmax_backward(gc, y, gc, outer, n, inner, log, gx);
      return TensorList{gx};
    });
  }
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype) { return softmax_impl(OpId::softmax, x, dim, dtype); }
Tensor log_softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  return softmax_impl(OpId::log_softmax, x, dim, dtype);
}

Tensor ops::causal_softmax(const Tensor& scores) {
  MT_CHECK(scores.defined() && scores.dim() >= 2, "causal_softmax: expected scores [..., L, S], got ",
           scores.defined() ? describe(scores) : std::string("an undefined tensor"));
  // The backward is softmax's: masked entries have y = 0, so their gradient is 0 as well.
  return softmax_impl(OpId::softmax, scores, -1, std::nullopt, scores.size(-2));
}

}  // namespace mixtrain
