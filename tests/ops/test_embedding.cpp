// embedding against a row-gather reference for every dtype (repeated indices, 2-D index tensors,
// padding_idx), its scatter-add backward against the reference's numerical derivative, gradcheck
// in fp64, poisoned kernel outputs, and errors.
#include "backends/all_kernels.h"
#include "ops/op_reference.h"

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;
using namespace mixtrain::testing;

namespace {

Values embedding_ref(const Values& idx, const Values& w, int64_t d) {
  Values out;
  for (double i : idx)
    for (int64_t j = 0; j < d; ++j) out.push_back(w[static_cast<int64_t>(i) * d + j]);
  return out;
}

}  // namespace

TEST(Embedding, GatherAndScatterAddMatchReferenceForEveryDtype) {
  const int64_t v = 7, d = 5;
  // Index 3 repeats (its gradient rows add up); shape [2, 4] gives an output [2, 4, 5].
  const mt::Tensor idx = mt::from_vector(std::vector<int64_t>{3, 0, 6, 3, 1, 3, 5, 0}, {2, 4});
  for (mt::DType dt : float_types()) {
    auto op = [](const std::vector<mt::Tensor>& in) { return F::embedding(in[0], in[1]); };
    auto ref = [&](const std::vector<Values>& in) { return embedding_ref(in[0], in[1], d); };
    check_op(std::string("embedding ") + mt::dtype_name(dt), op, ref, {idx, random_tensor({v, d}, dt, 1)}, {1},
             tolerance_for(dt));
  }
  EXPECT_TRUE(gradcheck([&](const std::vector<mt::Tensor>& in) { return F::embedding(idx, in[0]); },
                        {random_tensor({v, d}, mt::kFloat64, 2)}));
  // A transposed (non-contiguous) table.
  EXPECT_TRUE(gradcheck([&](const std::vector<mt::Tensor>& in) { return F::embedding(idx, in[0]); },
                        {random_tensor({d, v}, mt::kFloat64, 3).t()}));
}

TEST(Embedding, PaddingRowGetsNoGradient) {
  const mt::Tensor idx = mt::from_vector(std::vector<int64_t>{2, 0, 2, 1}, {4});
  for (int64_t pad : {int64_t{2}, int64_t{-2}}) {  // -2 wraps to row 2 of 4
    mt::Tensor w = random_tensor({4, 3}, mt::kFloat32, 4).set_requires_grad(true);
    mt::Tensor out = F::embedding(idx, w, pad);
    // The forward still reads the padding row (PyTorch does too).
    EXPECT_EQ(out.select(0, 0).to_vector<float>(), w.select(0, 2).to_vector<float>());
    mt::Tensor gy = random_tensor(out.shape(), mt::kFloat32, 5);
    out.backward(gy);
    const Values g = to_doubles(w.grad()), gyv = to_doubles(gy);
    for (int64_t j = 0; j < 3; ++j) {
      EXPECT_EQ(g[2 * 3 + j], 0.0) << pad;
      EXPECT_EQ(g[0 * 3 + j], gyv[1 * 3 + j]) << pad;
      EXPECT_EQ(g[1 * 3 + j], gyv[3 * 3 + j]) << pad;
      EXPECT_EQ(g[3 * 3 + j], 0.0) << pad;
    }
  }
}

TEST(Embedding, KernelsWriteEveryOutputElement) {
  const mt::DeviceType cpu = mt::DeviceType::CPU;
  const mt::Tensor idx = mt::from_vector(std::vector<int64_t>{1, 1, 0}, {3});
  for (mt::DType dt : float_types()) {
    const mt::Tensor w = random_tensor({4, 2}, dt, 6);
    mt::Tensor out = poisoned({3, 2}, dt), gw = poisoned({4, 2}, dt);
    mt::backends::embedding(cpu, w, idx, out);
    mt::backends::embedding_backward(cpu, out, idx, mt::backends::kNoPaddingIdx, gw);
    EXPECT_TRUE(all_finite(out)) << dt;
    EXPECT_TRUE(all_finite(gw)) << dt;  // rows 2 and 3 were never indexed: zero, not unwritten
  }
}

TEST(Embedding, BadArgumentsRaiseErrorsNamingTheOp) {
  const mt::Tensor w = mt::randn({5, 3});
  expect_error([&] { F::embedding(mt::from_vector(std::vector<int64_t>{1, 5}, {2}), w); },
               "embedding: index 5 at position 1 is out of range for a table of 5 rows");
  expect_error([&] { F::embedding(mt::from_vector(std::vector<int64_t>{-1}, {1}), w); }, "embedding: index -1");
  expect_error([&] { F::embedding(mt::from_vector(std::vector<float>{1}, {1}), w); }, "indices must be int64");
  expect_error([&] { F::embedding(mt::from_vector(std::vector<int64_t>{1}, {1}), mt::randn({5})); },
               "expected weight [num_embeddings, embedding_dim]");
  expect_error([&] { F::embedding(mt::from_vector(std::vector<int64_t>{1}, {1}), w, 5); },
               "padding_idx 5 is out of range");
}
