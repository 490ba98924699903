// topk: the k largest (smallest) elements along a dim and their indices. The kernel works on
// rows, so the dim is moved last around it; the gradient is scattered back to the picked places.
#include "backends/reduce.h"
#include "ops/op_helpers.h"

namespace mixtrain {

using namespace ops;

namespace {
// t with dim d swapped with the last one (a view; itself when d is last).
Tensor dim_last(const Tensor& t, int64_t d) { return d == t.dim() - 1 ? t : t.transpose(d, -1); }
}  // namespace

std::tuple<Tensor, Tensor> topk(const Tensor& x_in, int64_t k, int64_t dim_in, bool largest, bool sorted) {
  (void)sorted;  // the picks always come out in order, which sorted = false allows too
  const char* op = "topk";
  Tensor x = x_in;
  OpScope scope(OpId::topk, {&x});
  check_defined(op, x, "input");
  MT_CHECK(x.dtype() != kBool, op, ": bool tensors are not supported, got ", describe(x));
  // A 0-d tensor has one element along its only dim (dim 0 or -1), as in PyTorch.
  const Tensor x_nd = x.dim() == 0 ? x.reshape({1}) : x;
  const int64_t d = wrap_dim(dim_in, x_nd.dim(), op);
  const int64_t n = x_nd.size(d);
  MT_CHECK(k >= 0 && k <= n, op, ": k (", k, ") is out of range for dimension ", d, " of size ", n, " (", describe(x), ")");

  Tensor rows_in;
  {
    NoGradGuard no_grad;
    rows_in = dim_last(x_nd.detach(), d).contiguous();
  }
  const int64_t rows = n == 0 ? 0 : rows_in.numel() / n;
  Shape moved_shape = rows_in.shape();
  moved_shape.back() = k;
  Tensor values = new_empty(moved_shape, x), indices = new_empty(moved_shape, x, kInt64);
  if (rows * k > 0) backends::topk(x, rows_in, rows, n, k, largest, values, indices);
  {
    NoGradGuard no_grad;
    values = dim_last(values, d).contiguous();
    indices = dim_last(indices, d).contiguous();
    if (x.dim() == 0) values = values.reshape({}), indices = indices.reshape({});
  }
  if (is_floating(x.dtype()) && autograd::needs_grad({&x})) {
    const Shape xs = x.shape(), moved_x = rows_in.shape();
    // The indices are an output the caller holds and could overwrite: saved, so that is caught.
    const autograd::SavedTensor idx_s = autograd::saved(indices, "output 1 (indices)");
    autograd::record("TopkBackward0", values, {&x}, [xs, moved_x, idx_s, d, rows, n, k](const TensorList& g) {
      const Tensor& idx = idx_s;
      const Tensor g_nd = g[0].dim() == 0 ? g[0].reshape({1}) : g[0];
      const Tensor i_nd = idx.dim() == 0 ? idx.reshape({1}) : idx;
      Tensor grad_rows = new_empty(moved_x, g[0]);
      backends::topk_backward(g[0], dim_last(g_nd, d).contiguous(), dim_last(i_nd, d).contiguous(), rows, n, k,
                              grad_rows);
      return TensorList{dim_last(grad_rows, d).contiguous().reshape(xs)};
    });
  }
  return {values, indices};
}

std::tuple<Tensor, Tensor> Tensor::topk(int64_t k, int64_t dim, bool largest, bool sorted) const {
  return mixtrain::topk(*this, k, dim, largest, sorted);
}

}  // namespace mixtrain
