// index_select (indexing.h) as a row gather: embedding for floating tensors (differentiable),
// slice by slice for integers and bools.
#include "mixtrain/ops/indexing.h"

#include "mixtrain/base/error.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/ops/functional.h"
#include "mixtrain/ops/nn_functional.h"
#include "ops/op_helpers.h"

namespace mixtrain {

Tensor index_select(const Tensor& x, int64_t dim_in, const Tensor& index) {
  const char* op = "index_select";
  ops::check_defined(op, x, "input");
  ops::check_defined(op, index, "index");
  MT_CHECK(x.dim() >= 1, op, ": expected a tensor with at least one dimension, got ", ops::describe(x));
  MT_CHECK(index.dtype() == kInt64 && index.dim() <= 1, op, ": index must be an int64 tensor of 0 or 1 dimensions, got ",
           ops::describe(index));
  ops::check_same_device(op, x, index);
  MT_CHECK(dim_in >= -x.dim() && dim_in < x.dim(), op, ": dim ", dim_in, " is out of range for ", ops::describe(x));
  const int64_t dim = dim_in < 0 ? dim_in + x.dim() : dim_in;
  const int64_t n = x.size(dim);
  const Tensor idx = index.reshape({-1});
  if (idx.device().is_cpu()) {
    for (int64_t i : idx.contiguous().to_vector<int64_t>())
      MT_CHECK(i >= 0 && i < n, op, ": index ", i, " is out of range for dimension ", dim, " of size ", n, " (",
               ops::describe(x), ")");
  }
  // Move dim to the front and view the rest as one row: then a row gather, which embedding does
  // on every backend (and differentiably, adding up the gradient of repeated rows).
  const Tensor front = dim == 0 ? x : x.transpose(0, dim);
  Shape rest(front.shape().begin() + 1, front.shape().end());
  int64_t row = 1;
  for (int64_t s : rest) row *= s;
  Tensor rows;
  if (is_floating(x.dtype()) && row > 0) {
    rows = nn::functional::embedding(idx, front.reshape({n, row}));
  } else {  // integers and bools: no gradient, gathered slice by slice
    NoGradGuard no_grad;
    std::vector<Tensor> picked;
    for (int64_t i : idx.to(Device::cpu()).contiguous().to_vector<int64_t>()) picked.push_back(front.select(0, i));
    Shape empty_shape = rest;
    empty_shape.insert(empty_shape.begin(), 0);
    rows = picked.empty() ? Tensor::empty(empty_shape, x.options()) : stack(picked, 0);
  }
  Shape out_shape = rest;
  out_shape.insert(out_shape.begin(), idx.numel());
  const Tensor out = rows.reshape(out_shape);
  return dim == 0 ? out : out.transpose(0, dim).contiguous();
}

Tensor Tensor::index_select(int64_t dim, const Tensor& index) const { return mixtrain::index_select(*this, dim, index); }

}  // namespace mixtrain
