// The CUDA embedding gather and its scatter-add backward (with padding) against the CPU backend;
// an index out of range is an error.
#include "backends/cuda_test_util.h"

namespace mixtrain::testing {
namespace {

class CudaEmbedding : public CudaTest {};

TEST_F(CudaEmbedding, EmbeddingGatherAndScatterWithPadding) {
  for (DType dt : float_types()) {
    const Tensor weight = random_tensor({50, 24}, dt, 68);
    const Tensor idx = randint(0, 50, {300}, TensorOptions(kInt64));  // many repeats
    const Tensor gy = random_tensor({300, 24}, dt, 69);
    compare_backends(std::string("embedding ") + dtype_name(dt), {weight, idx, gy},
                     {{{300, 24}, dt, "rows", exact()}, {weight.shape(), dt, "grad", tolerance_for(dt)}},
                     [](auto& bk, const auto& in, const auto& out) {
                       backends::embedding(bk, in[0], in[1], out[0]);
                       backends::embedding_backward(bk, in[2], in[1], /*padding_idx=*/7, out[1]);
                     });
  }
}

TEST_F(CudaEmbedding, EmbeddingIndexOutOfRangeIsAnError) {
  const Tensor weight = randn({10, 4}, TensorOptions().device(gpu_device()));
  const Tensor idx = from_vector(std::vector<int64_t>{1, 2, 10}, {3}, TensorOptions(kInt64).device(gpu_device()));
  expect_error([&] { nn::functional::embedding(idx, weight); },
               "index 10 at position 2 is out of range for a table of 10 rows");
}

}  // namespace
}  // namespace mixtrain::testing
