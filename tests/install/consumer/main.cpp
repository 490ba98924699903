#include <mixtrain/mixtrain.h>

#include <cstdio>

static_assert(__cplusplus >= 201703L, "mixtrain::mixtrain carries cxx_std_17 to its users");

namespace mt = mixtrain;

int main() {
  mt::manual_seed(0);
  mt::Tensor w = mt::randn({4, 3}, mt::TensorOptions().requires_grad(true));
  mt::Tensor loss = mt::matmul(mt::randn({2, 4}), w).relu().sum();
  loss.backward();
  const bool ok = w.grad().defined() && w.grad().shape() == mt::Shape{4, 3};
  std::printf("consumer of mixtrain %s: %s\n", MIXTRAIN_VERSION, ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
