// Reductions (sum, mean, max, min, amax, argmax).
#include <algorithm>

#include "backends/copy.h"
#include "backends/reduce.h"
#include "ops/op_helpers.h"

namespace mixtrain {

using namespace ops;
using backends::ReduceOp;

namespace {

// Reduced dims (sorted, unique) and the shapes before and after.
struct ReducePlan {
  std::vector<int64_t> dims;
  Shape out_shape;      // without the reduced dims (or with 1s when keepdim)
  Shape keepdim_shape;  // with 1s in the reduced dims
};

ReducePlan plan_reduce(const char* op, const Tensor& x, const std::vector<int64_t>& dims_in, bool keepdim) {
  ReducePlan p;
  if (dims_in.empty()) {
    for (int64_t d = 0; d < x.dim(); ++d) p.dims.push_back(d);
  } else {
    for (int64_t d : dims_in) p.dims.push_back(wrap_dim(d, x.dim(), op));
  }
  std::sort(p.dims.begin(), p.dims.end());
  MT_CHECK(std::adjacent_find(p.dims.begin(), p.dims.end()) == p.dims.end(), op, ": a dimension repeats in the list");
  for (int64_t d = 0; d < x.dim(); ++d) {
    const bool reduced = std::binary_search(p.dims.begin(), p.dims.end(), d);
    p.keepdim_shape.push_back(reduced ? 1 : x.size(d));
    if (!reduced || keepdim) p.out_shape.push_back(reduced ? 1 : x.size(d));
  }
  return p;
}

// A sum over leading and trailing dims around the kept ones (a convolution's bias gradient, {0, 2,
// 3} of NCHW) in two passes over x as it lies: the trailing block first, into partial sums in the
// accumulation dtype, then the leading block. A transposing copy of x would cost more than the
// reduction itself. False when the dims are not of that form.
bool sum_around_kept(const Tensor& x, const ReducePlan& p, const Tensor& out) {
  int64_t lead = 0;
  while (lead < static_cast<int64_t>(p.dims.size()) && p.dims[lead] == lead) ++lead;
  const int64_t trail = static_cast<int64_t>(p.dims.size()) - lead;
  if (lead == 0 || trail == 0) return false;
  for (int64_t k = lead; k < static_cast<int64_t>(p.dims.size()); ++k)
    if (p.dims[k] != x.dim() - trail + (k - lead)) return false;
  int64_t outer = 1, kept = 1, n_trail = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < lead) outer *= x.size(d);
    else if (d < x.dim() - trail) kept *= x.size(d);
    else n_trail *= x.size(d);
  }
  // The partials keep what the backend accumulates in: double on the CPU (so the result is the
  // one-pass sum rounded once, in any layout), fp32 on a GPU for fp32 and half inputs.
  const DType acc = x.device().is_cpu() ? kFloat64 : (is_half(x.dtype()) ? kFloat32 : x.dtype());
  NoGradGuard no_grad;
  const Tensor partial = Tensor::empty({outer * kept}, x.options().dtype(acc));
  backends::reduce(x, ReduceOp::Sum, x, outer * kept, n_trail, 1, partial, Tensor());
  const Tensor total = out.dtype() == acc ? out : Tensor::empty(out.shape(), out.options().dtype(acc));
  backends::reduce(x, ReduceOp::Sum, partial, 1, outer, kept, total, Tensor());
  if (!total.is_same(out)) backends::copy(out, total, out);
  return true;
}

// Runs a reduce kernel; x is permuted so the reduced dims form one block when they do not.
void run_reduce(ReduceOp op, const Tensor& x_in, const ReducePlan& p, const Tensor& out, const Tensor& indices) {
  Tensor x = x_in;
  // A channels-last sum runs in memory order when that keeps the kept dims in their order (a
  // convolution's bias gradient, dims {0, 2, 3}): no transposing copy. Not for max/min, whose
  // index is the first in logical order.
  if (op == ReduceOp::Sum && x.dim() == 4 && x.suggest_memory_format() == MemoryFormat::ChannelsLast) {
    constexpr int64_t kNhwcPosition[4] = {0, 3, 1, 2};  // where logical dim d sits in N, H, W, C
    int64_t last_kept = -1;
    bool in_order = true;
    ReducePlan q = p;
    q.dims.clear();
    for (int64_t d = 0; d < 4; ++d) {
      const bool reduced = std::binary_search(p.dims.begin(), p.dims.end(), d);
      if (reduced) q.dims.push_back(kNhwcPosition[d]);
      else in_order = in_order && kNhwcPosition[d] > last_kept, last_kept = kNhwcPosition[d];
    }
    if (in_order) {
      std::sort(q.dims.begin(), q.dims.end());
      NoGradGuard no_grad;
      return run_reduce(op, x.detach().permute({0, 2, 3, 1}), q, out, indices);
    }
  }
  const bool block = p.dims.empty() || p.dims.back() - p.dims.front() + 1 == static_cast<int64_t>(p.dims.size());
  if (!block && op == ReduceOp::Sum && is_floating(x.dtype()) && x.is_contiguous() && sum_around_kept(x, p, out)) return;
  int64_t first = p.dims.empty() ? x.dim() : p.dims.front();
  if (!block) {
    Shape perm;
    for (int64_t d = 0; d < x.dim(); ++d)
      if (!std::binary_search(p.dims.begin(), p.dims.end(), d)) perm.push_back(d);
    first = static_cast<int64_t>(perm.size());
    perm.insert(perm.end(), p.dims.begin(), p.dims.end());
    NoGradGuard no_grad;
    x = x.detach().permute(perm);
  }
  {
    NoGradGuard no_grad;
    x = x.detach().contiguous();
  }
  int64_t outer = 1, n = 1, inner = 1;
  const int64_t count = static_cast<int64_t>(p.dims.size());
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < first) outer *= x.size(d);
    else if (d < first + count) n *= x.size(d);
    else inner *= x.size(d);
  }
  backends::reduce(x, op, x, outer, n, inner, out, indices);
}

int64_t reduced_count(const Tensor& x, const ReducePlan& p) {
  int64_t n = 1;
  for (int64_t d : p.dims) n *= x.size(d);
  return n;
}

Tensor minmax(const Tensor& x_in, int64_t dim, bool keepdim, bool is_max, Tensor* indices_out) {
  Tensor x = x_in;
  const char* name = is_max ? "max" : "min";
  OpScope scope(is_max ? OpId::max : OpId::min, {&x});
  check_defined(name, x, "input");
  MT_CHECK(x.dim() > 0 && x.size(wrap_dim(dim, x.dim(), name)) > 0, name, ": cannot reduce an empty dimension of ",
           describe(x));
  const ReducePlan p = plan_reduce(name, x, {dim}, keepdim);
  Tensor out = new_empty(p.out_shape, x);
  Tensor idx = new_empty(p.out_shape, x, kInt64);
  run_reduce(is_max ? ReduceOp::Max : ReduceOp::Min, x, p, out, idx);
  if (indices_out) *indices_out = idx;
  if (autograd::needs_grad({&x})) {
    const int64_t d = p.dims[0];
    const Shape xs = x.shape(), ks = p.keepdim_shape;
    // The indices are an output the caller can hold (indices_out), so they are checked as well.
    const autograd::SavedTensor idx_s = autograd::saved(idx, "output 1 (indices)");
    autograd::record(is_max ? "MaxBackward0" : "MinBackward0", out, {&x}, [d, xs, ks, idx_s](const TensorList& g) {
      // One-hot of the picked positions along d, built from arange so any backend can run it.
      Shape pos_shape(xs.size(), 1);
      pos_shape[d] = xs[d];
      Tensor pos = arange(0, static_cast<double>(xs[d]), 1.0, TensorOptions(kInt64).device(g[0].device())).reshape(pos_shape);
      Tensor picked = eq(pos, idx_s.unpack().reshape(ks));
      return TensorList{where(picked, g[0].reshape(ks), zeros({}, g[0].options()))};
    });
  }
  return out;
}

}  // namespace

Tensor sum(const Tensor& x_in, const std::vector<int64_t>& dims, bool keepdim, std::optional<DType> dtype_in) {
  Tensor x = x_in;
  std::optional<DType> dtype = dtype_in;
  OpScope scope(OpId::sum, {&x}, &dtype);
  check_defined("sum", x, "input");
  if (dtype && *dtype != x.dtype()) x = x.to(*dtype);
  const ReducePlan p = plan_reduce("sum", x, dims, keepdim);
  const DType out_dtype = is_floating(x.dtype()) ? x.dtype() : kInt64;
  Tensor out = new_empty(p.out_shape, x, out_dtype);
  run_reduce(ReduceOp::Sum, x, p, out, Tensor());
  if (autograd::needs_grad({&x})) {
    const Shape xs = x.shape(), ks = p.keepdim_shape;
    autograd::record("SumBackward0", out, {&x}, [xs, ks](const TensorList& g) { return TensorList{g[0].reshape(ks).expand(xs)}; });
  }
  return out;
}

Tensor mean(const Tensor& x_in, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor x = x_in;
  OpScope scope(OpId::mean, {&x});
  check_defined("mean", x, "input");
  check_floating("mean", x);
  const ReducePlan p = plan_reduce("mean", x, dims, keepdim);
  const double n = static_cast<double>(reduced_count(x, p));
  Tensor out;
  {
    NoGradGuard no_grad;
    // Accumulate half inputs in fp32: their sum can overflow where the mean does not.
    const DType acc = is_half(x.dtype()) ? kFloat32 : x.dtype();
    const Tensor s = mul(sum(x.detach(), dims, keepdim, acc), 1.0 / n);
    out = s.dtype() == x.dtype() ? s : s.to(x.dtype());
  }
  if (autograd::needs_grad({&x})) {
    const Shape xs = x.shape(), ks = p.keepdim_shape;
    autograd::record("MeanBackward0", out, {&x}, [xs, ks, n](const TensorList& g) {
      return TensorList{mul(g[0].reshape(ks).expand(xs), 1.0 / n)};
    });
  }
  return out;
}

Tensor max(const Tensor& x, int64_t dim, bool keepdim) { return minmax(x, dim, keepdim, true, nullptr); }
Tensor min(const Tensor& x, int64_t dim, bool keepdim) { return minmax(x, dim, keepdim, false, nullptr); }
Tensor max(const Tensor& x) { return minmax(x.reshape({-1}), 0, false, true, nullptr); }

Tensor amax(const Tensor& x_in, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor x = x_in;
  OpScope scope(OpId::amax, {&x});
  check_defined("amax", x, "input");
  const ReducePlan p = plan_reduce("amax", x, dims, keepdim);
  MT_CHECK(reduced_count(x, p) > 0, "amax: cannot reduce an empty dimension of ", describe(x));
  Tensor out = new_empty(p.out_shape, x);
  run_reduce(ReduceOp::Max, x, p, out, Tensor());  // the values of max, without its indices
  if (autograd::needs_grad({&x})) {
    const std::vector<int64_t> rd = p.dims;
    const Shape ks = p.keepdim_shape;
    const autograd::SavedTensor x_s = autograd::saved(x, "input 0"), y_s = autograd::saved(out, "output 0");
    autograd::record(backward_name(OpId::amax), out, {&x}, [rd, ks, x_s, y_s](const TensorList& g) {
      // PyTorch's rule: g / (number of maxima) at each maximum. A NaN maximum matches nothing, so
      // its gradient is 0 / 0, NaN, as there. Half counts are kept in fp32, where they are exact.
      const DType dt = g[0].dtype(), acc = is_half(dt) ? kFloat32 : dt;
      const Tensor hit = eq(x_s.unpack(), y_s.unpack().reshape(ks)).to(acc);
      const Tensor share = div(g[0].reshape(ks).to(acc), sum(hit, rd, true));
      return TensorList{mul(share, hit).to(dt)};
    });
  }
  return out;
}

Tensor argmax(const Tensor& x_in, int64_t dim, bool keepdim) {
  Tensor x = x_in;
  OpScope scope(OpId::argmax, {&x});
  NoGradGuard no_grad;
  Tensor idx;
  minmax(x.detach(), dim, keepdim, true, &idx);
  return idx;
}

}  // namespace mixtrain
