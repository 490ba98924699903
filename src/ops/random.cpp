// The random family's ops: rand and randn (the counter-based generator evaluated where the tensor
// lives) and dropout, whose mask comes from the same draws.
#include "backends/copy.h"
#include "backends/elementwise.h"
#include "backends/random.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/ops/nn_functional.h"
#include "ops/op_helpers.h"

namespace mixtrain {

namespace {
// Drawn where the tensor lives: the backend evaluates the counter-based generator per element,
// so a device tensor needs no host loop or copy, and every device gives the same values.
Tensor random_tensor(const char* op, const Shape& shape, Generator& gen, const TensorOptions& options,
                     backends::RandomKind kind) {
  MT_CHECK(is_floating(options.dtype()), op, ": expected a floating dtype, got ", options.dtype());
  Tensor t = Tensor::empty(shape, TensorOptions().dtype(options.dtype()).device(options.device()));
  const uint64_t per_element = kind == backends::RandomKind::Normal ? 2 : 1;
  const GeneratorState draws = gen.reserve_draws(static_cast<uint64_t>(t.numel()) * per_element);
  backends::random(t, t, kind, draws.seed, draws.offset);
  if (options.requires_grad()) t.set_requires_grad(true);
  return t;
}
}  // namespace

Tensor rand(const Shape& shape, Generator& gen, const TensorOptions& options) {
  return random_tensor("rand", shape, gen, options, backends::RandomKind::Uniform);
}

Tensor randn(const Shape& shape, Generator& gen, const TensorOptions& options) {
  return random_tensor("randn", shape, gen, options, backends::RandomKind::Normal);
}

Tensor rand(const Shape& shape, const TensorOptions& options) { return rand(shape, default_generator(), options); }
Tensor randn(const Shape& shape, const TensorOptions& options) { return randn(shape, default_generator(), options); }

}  // namespace mixtrain

namespace mixtrain::nn::functional {

using namespace mixtrain::ops;

namespace {
// x times dropout's mask and scale in one backend pass. The mask is a function of the generator's
// draw counter, so backward regenerates it for the gradient rather than keeping it alive.
Tensor apply_dropout_mask(const Tensor& x, double p, uint64_t seed, uint64_t offset) {
  NoGradGuard no_grad;
  const Tensor xc = x.contiguous();
  Tensor out = new_empty(x.shape(), x);
  backends::dropout(x, xc, p, seed, offset, out);
  return out;
}
}  // namespace

Tensor dropout(const Tensor& x_in, double p, bool training) {
  Tensor x = x_in;
  OpScope scope(OpId::dropout, {&x});
  check_defined("dropout", x, "input");
  check_floating("dropout", x);
  MT_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability must be in [0, 1], got ", p);
  if (!training || p == 0.0) return x;
  if (p == 1.0) return mul(x, 0.0);
  // One draw per element from the default generator, as rand(x.shape()) would take.
  const GeneratorState draws = default_generator().reserve_draws(static_cast<uint64_t>(x.numel()));
  const uint64_t seed = draws.seed, offset = draws.offset;
  Tensor out = apply_dropout_mask(x, p, seed, offset);
  autograd::record("DropoutBackward0", out, {&x}, [p, seed, offset](const TensorList& g) {
    return TensorList{apply_dropout_mask(g[0], p, seed, offset)};
  });
  return out;
}

Tensor& dropout_(Tensor& x, double p, bool training) {
  MT_CHECK(p >= 0.0 && p <= 1.0, "dropout_: probability must be in [0, 1], got ", p);
  check_defined("dropout_", x, "input");
  HookExcludeGuard not_autocast;  // in-place ops keep self's dtype
  if (!training || p == 0.0) return x;
  check_writable_inplace("dropout_", x);
  // The same draws, mask and scale as dropout(x), so the two give the same values.
  const GeneratorState draws = default_generator().reserve_draws(p == 1.0 ? 0 : static_cast<uint64_t>(x.numel()));
  const uint64_t seed = draws.seed, offset = draws.offset;
  if (p == 1.0) {
    backends::binary_scalar(x, backends::BinaryOp::Mul, x, 0.0, false, x);
  } else if (x.is_contiguous()) {
    backends::dropout(x, x, p, seed, offset, x);
  } else {
    const Tensor out = apply_dropout_mask(x, p, seed, offset);
    backends::copy(x, out, x);
  }
  x.bump_version();
  if (autograd::needs_grad({&x})) {
    autograd::record("DropoutBackward0", x, {&x}, [p, seed, offset](const TensorList& g) {
      return TensorList{p == 1.0 ? mul(g[0], 0.0) : apply_dropout_mask(g[0], p, seed, offset)};
    });
  }
  return x;
}

Tensor dropout(const Tensor& x, double p, bool training, bool inplace) {
  if (!inplace) return dropout(x, p, training);
  Tensor self = x;
  return dropout_(self, p, training);
}

}  // namespace mixtrain::nn::functional
