// cat, stack, split, chunk. cat copies each input into its slice of the output with the copy
// kernel (which converts dtypes, so mixed inputs need no separate casts); its backward hands
// each input the matching slice of the gradient, which the engine casts back to the input's
// dtype. split and chunk are views.
#include "backends/copy.h"
#include "ops/op_helpers.h"

namespace mixtrain {

using namespace ops;

namespace {

// PyTorch still accepts 1-D empty tensors of any other rank in cat and skips them.
bool legacy_empty(const Tensor& t) { return t.dim() == 1 && t.size(0) == 0; }

Tensor cat_impl(const char* op, std::vector<Tensor>& ts, int64_t dim) {
  MT_CHECK(!ts.empty(), op, ": expected a non-empty list of tensors");
  const Tensor* ref = nullptr;
  DType dtype = ts[0].dtype();
  for (size_t i = 0; i < ts.size(); ++i) {
    MT_CHECK(ts[i].defined(), op, ": tensor ", i, " is undefined");
    check_same_device(op, ts[0], ts[i]);
    dtype = promote_types(dtype, ts[i].dtype());
    if (!ref && !legacy_empty(ts[i])) ref = &ts[i];
  }
  if (!ref) ref = &ts[0];
  const int64_t d = wrap_dim(dim, ref->dim(), op);
  Shape shape = ref->shape();
  shape[d] = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    if (legacy_empty(t) && &t != ref) continue;
    bool ok = t.dim() == ref->dim();
    for (int64_t k = 0; ok && k < t.dim(); ++k) ok = k == d || t.size(k) == ref->size(k);
    MT_CHECK(ok, op, ": tensor ", i, " ", describe(t), " does not match ", describe(*ref),
             " in every dimension but ", d);
    shape[d] += t.size(d);
  }
  // Channels-last inputs (a UNet's skip connections) give a channels-last result.
  Tensor out = Tensor::empty(shape, TensorOptions(dtype).device(ref->device()), ref->suggest_memory_format());
  std::vector<int64_t> offsets(ts.size(), -1), lengths(ts.size(), 0);
  {
    NoGradGuard no_grad;
    const Tensor dst = out.detach();
    int64_t off = 0;
    for (size_t i = 0; i < ts.size(); ++i) {
      if (legacy_empty(ts[i]) && &ts[i] != ref) continue;
      offsets[i] = off, lengths[i] = ts[i].size(d);
      backends::copy(out, ts[i].detach(), dst.narrow(d, off, lengths[i]));
      off += lengths[i];
    }
  }
  std::vector<const Tensor*> inputs;
  for (const Tensor& t : ts) inputs.push_back(&t);
  std::vector<Tensor*> outputs{&out};
  if (autograd::needs_grad(ts)) {
    autograd::record("CatBackward0", outputs, inputs, [offsets, lengths, d](const TensorList& g) {
      TensorList r(offsets.size());
      for (size_t i = 0; i < offsets.size(); ++i)
        if (offsets[i] >= 0) r[i] = g[0].narrow(d, offsets[i], lengths[i]);
      return r;
    });
  }
  return out;
}

std::vector<Tensor*> pointers(std::vector<Tensor>& ts) {
  std::vector<Tensor*> p;
  for (Tensor& t : ts) p.push_back(&t);
  return p;
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  std::vector<Tensor> ts = tensors;
  std::vector<Tensor*> p = pointers(ts);
  OpScope scope(OpId::cat, p.data(), static_cast<int>(p.size()));
  return cat_impl("cat", ts, dim);
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  std::vector<Tensor> ts = tensors;
  std::vector<Tensor*> p = pointers(ts);
  OpScope scope(OpId::stack, p.data(), static_cast<int>(p.size()));
  MT_CHECK(!ts.empty(), "stack: expected a non-empty list of tensors");
  for (size_t i = 0; i < ts.size(); ++i) {
    MT_CHECK(ts[i].defined(), "stack: tensor ", i, " is undefined");
    MT_CHECK(ts[i].shape() == ts[0].shape(), "stack: tensor ", i, " ", describe(ts[i]), " differs in shape from tensor 0 ",
             describe(ts[0]));
  }
  const int64_t d = wrap_dim(dim, ts[0].dim() + 1, "stack");
  for (Tensor& t : ts) t = t.unsqueeze(d);
  return cat_impl("stack", ts, d);
}

std::vector<Tensor> split(const Tensor& x_in, const std::vector<int64_t>& sizes, int64_t dim) {
  Tensor x = x_in;
  OpScope scope(OpId::split, {&x});
  check_defined("split", x, "input");
  MT_CHECK(x.dim() >= 1, "split: cannot split a 0-dim tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    MT_CHECK(s >= 0, "split: sizes must be non-negative, got ", shape_str(sizes));
    total += s;
  }
  MT_CHECK(total == x.size(d), "split: sizes ", shape_str(sizes), " do not add up to ", x.size(d), ", the size of dim ",
           d, " of ", describe(x));
  std::vector<Tensor> out;
  int64_t off = 0;
  for (int64_t s : sizes) {
    out.push_back(x.narrow(d, off, s));
    off += s;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  check_defined("split", x, "input");
  MT_CHECK(x.dim() >= 1, "split: cannot split a 0-dim tensor");
  const int64_t n = x.size(wrap_dim(dim, x.dim(), "split"));
  MT_CHECK(split_size > 0 || (split_size == 0 && n == 0), "split: split_size must be positive, got ", split_size);
  std::vector<int64_t> sizes;
  for (int64_t off = 0; off < n; off += split_size) sizes.push_back(std::min(split_size, n - off));
  if (sizes.empty()) sizes.push_back(0);
  return split(x, sizes, dim);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  check_defined("chunk", x, "input");
  MT_CHECK(chunks >= 1, "chunk: chunks must be positive, got ", chunks);
  MT_CHECK(x.dim() >= 1, "chunk: cannot chunk a 0-dim tensor");
  const int64_t n = x.size(wrap_dim(dim, x.dim(), "chunk"));
  return split(x, std::max<int64_t>(1, (n + chunks - 1) / chunks), dim);
}

}  // namespace mixtrain
