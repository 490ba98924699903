// var and std (statistics.h), as functions and as Tensor methods, built from mean and sum.
#include "mixtrain/ops/statistics.h"

#include "mixtrain/base/error.h"
#include "mixtrain/ops/functional.h"
#include "ops/op_helpers.h"

namespace mixtrain {

Tensor var(const Tensor& x, const std::vector<int64_t>& dims, bool unbiased, bool keepdim) {
  const char* op = "var";
  ops::check_defined(op, x, "input");
  ops::check_floating(op, x);
  const Tensor xf = is_half(x.dtype()) ? x.to(kFloat32) : x;
  int64_t n = 1;
  if (dims.empty()) {
    n = x.numel();
  } else {
    for (int64_t d : dims) {
      MT_CHECK(d >= -x.dim() && d < x.dim(), op, ": dim ", d, " is out of range for ", ops::describe(x));
      n *= x.size(d < 0 ? d + x.dim() : d);
    }
  }
  const Tensor centred = xf - mixtrain::mean(xf, dims, /*keepdim=*/true);
  // n - 1 = 0 gives 0 / 0 = nan, as in PyTorch.
  Tensor v = mixtrain::sum(centred * centred, dims, keepdim) / static_cast<double>(unbiased ? n - 1 : n);
  return v.dtype() == x.dtype() ? v : v.to(x.dtype());
}

Tensor std(const Tensor& x, const std::vector<int64_t>& dims, bool unbiased, bool keepdim) {
  const Tensor v = var(is_half(x.dtype()) ? x.to(kFloat32) : x, dims, unbiased, keepdim).sqrt();
  return v.dtype() == x.dtype() ? v : v.to(x.dtype());
}

Tensor Tensor::var(bool unbiased) const { return mixtrain::var(*this, {}, unbiased, false); }
Tensor Tensor::var(const DimList& dims, bool unbiased, bool keepdim) const {
  return mixtrain::var(*this, dims.vec(), unbiased, keepdim);
}
Tensor Tensor::var(int dim, bool unbiased, bool keepdim) const { return mixtrain::var(*this, {dim}, unbiased, keepdim); }
Tensor Tensor::var(int64_t dim, bool unbiased, bool keepdim) const {
  return mixtrain::var(*this, {dim}, unbiased, keepdim);
}
Tensor Tensor::std(bool unbiased) const { return mixtrain::std(*this, {}, unbiased, false); }
Tensor Tensor::std(int dim, bool unbiased, bool keepdim) const { return mixtrain::std(*this, {dim}, unbiased, keepdim); }
Tensor Tensor::std(int64_t dim, bool unbiased, bool keepdim) const {
  return mixtrain::std(*this, {dim}, unbiased, keepdim);
}
Tensor Tensor::std(const DimList& dims, bool unbiased, bool keepdim) const {
  return mixtrain::std(*this, dims.vec(), unbiased, keepdim);
}

}  // namespace mixtrain
