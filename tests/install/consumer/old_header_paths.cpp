// A user's code written before the base types moved to <mixtrain/base/...> (docs/ARCHITECTURE.md,
// "Public API"): it includes the old paths one by one, without the umbrella header, and still
// compiles and runs against the installed package. check_install.cmake runs it.
#include <mixtrain/autograd/grad_mode.h>
#include <mixtrain/core/arg.h>
#include <mixtrain/core/checked_int.h>
#include <mixtrain/core/device.h>
#include <mixtrain/core/dtype.h>
#include <mixtrain/core/dtype_traits.h>
#include <mixtrain/core/elementwise_ops.h>
#include <mixtrain/core/error.h>
#include <mixtrain/core/factories.h>
#include <mixtrain/core/float8.h>
#include <mixtrain/core/half.h>
#include <mixtrain/core/host_device.h>
#include <mixtrain/core/rng.h>
#include <mixtrain/core/scalar.h>
#include <mixtrain/core/shape.h>
#include <mixtrain/core/tensor.h>

#include <cstdio>

namespace mt = mixtrain;

int main() {
  mt::NoGradGuard no_grad;
  mt::manual_seed(0);
  const mt::Tensor x = mt::ones({2, 3}, mt::TensorOptions(mt::kFloat32).device(mt::Device(mt::kCPU)));
  bool ok = !mt::autograd::is_grad_enabled() && x.numel() == 6 && mt::shape_str(x.shape()) == "[2, 3]";
  ok = ok && static_cast<float>(mt::Half(1.5f)) == 1.5f && mt::checked_mul(int64_t{3}, int64_t{4}, "elements") == 12;
  bool threw = false;
  try {
    MT_ERROR("an error from <mixtrain/core/error.h>");
  } catch (const mt::Error&) {
    threw = true;
  }
  ok = ok && threw;
  std::printf("old header paths: %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
