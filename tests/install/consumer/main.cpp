#include <mixtrain/mixtrain.h>

#include <cstdio>

static_assert(__cplusplus >= 201703L, "mixtrain::mixtrain carries cxx_std_17 to its users");

namespace mt = mixtrain;

int main() {
  mt::manual_seed(0);
  mt::Tensor w = mt::randn({4, 3}, mt::TensorOptions().requires_grad(true));
  mt::Tensor loss = mt::matmul(mt::randn({2, 4}), w).relu().sum();
  loss.backward();
  bool ok = w.grad().defined() && w.grad().shape() == mt::Shape{4, 3};
  // mixtrain::data from the installed headers (zlib stays inside the library).
  mt::data::TensorDataset ds(mt::randn({10, 4}), mt::arange(10.0));
  mt::data::DataLoader loader(ds, mt::data::DataLoaderOptions().batch_size(4).shuffle(true).num_workers(1));
  int batches = 0;
  for (const mt::data::Batch& b : loader) batches += b.data.size(1) == 4;
  ok = ok && batches == 3 && mt::ones({2}).str() == "tensor([1., 1.])";
  std::printf("consumer of mixtrain %s: %s\n", MIXTRAIN_VERSION, ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
