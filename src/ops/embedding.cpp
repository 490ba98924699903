// embedding: a row gather from the table, whose backward scatter-adds rows into the table's
// gradient (tokens that repeat add up; the padding row gets none).
#include "backends/embedding.h"
#include "mixtrain/ops/nn_functional.h"
#include "ops/op_helpers.h"

namespace mixtrain::nn::functional {

using namespace mixtrain::ops;

Tensor embedding(const Tensor& input, const Tensor& weight, std::optional<int64_t> padding_idx) {
  Tensor w = weight;
  OpScope scope(OpId::embedding, {&w});
  const char* op = "embedding";
  check_defined(op, input, "input");
  check_defined(op, w, "weight");
  check_floating(op, w);
  check_same_device(op, input, w);
  MT_CHECK(input.dtype() == kInt64, op, ": indices must be int64, got ", describe(input));
  MT_CHECK(w.dim() == 2, op, ": expected weight [num_embeddings, embedding_dim], got ", describe(w));
  const int64_t v = w.size(0), d = w.size(1);
  int64_t pad = backends::kNoPaddingIdx;
  if (padding_idx) {
    MT_CHECK(*padding_idx >= -v && *padding_idx < v, op, ": padding_idx ", *padding_idx,
             " is out of range for a table of ", v, " rows");
    pad = *padding_idx < 0 ? *padding_idx + v : *padding_idx;
  }
  Tensor idx, wc;
  {
    NoGradGuard no_grad;
    idx = input.detach().contiguous();
    wc = w.detach().contiguous();
  }
  Shape out_shape = input.shape();
  out_shape.push_back(d);
  Tensor out = new_empty(out_shape, w);
  backends::embedding(w, wc, idx, out);
  if (autograd::needs_grad({&w})) {
    const Shape ws = w.shape();
    const autograd::SavedTensor idx_s = autograd::saved(idx, "input 0 (indices)");
    autograd::record("EmbeddingBackward0", out, {&w}, [idx_s, pad, ws](const TensorList& g) {
      Tensor gw = Tensor::empty(ws, g[0].options());
      backends::embedding_backward(gw, g[0].contiguous(), idx_s, pad, gw);
      return TensorList{gw};
    });
  }
  return out;
}

}  // namespace mixtrain::nn::functional
