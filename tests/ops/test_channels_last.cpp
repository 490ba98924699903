// Channels-last (NHWC) tensors through the ops a convolutional network uses: each op's result in
// channels-last must hold the same values as in NCHW, with the layout kept where PyTorch keeps
// it (elementwise, casts, convolutions, batch norm, max pooling) and gradients in the layout of
// what they belong to. The NCHW results themselves are tested against fp64 references in
// test_conv.cpp, test_norm.cpp and test_pool_upsample.cpp.
#include <functional>

#include "ops/op_reference.h"

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;
using namespace mixtrain::testing;
using mt::MemoryFormat;
using mt::Tensor;

namespace {

bool is_nhwc(const Tensor& t) { return t.suggest_memory_format() == MemoryFormat::ChannelsLast; }

// Runs f on NCHW inputs and again with the first (the activation) in channels-last; compares outputs and the
// gradients of sum(out * g) (exactly when `exact`, else within tol), and checks that the
// channels-last run's output and input gradients are channels-last.
void check_same_in_both_layouts(const std::string& what, const std::function<Tensor(const std::vector<Tensor>&)>& f,
                                const std::vector<Tensor>& inputs, bool exact, const Tolerance& tol) {
  SCOPED_TRACE(what);
  std::vector<Tensor> a, b;
  for (const Tensor& t : inputs) {
    a.push_back(t.detach().clone().set_requires_grad(mt::is_floating(t.dtype())));
    Tensor cl = b.empty() ? t.detach().contiguous(MemoryFormat::ChannelsLast) : t.detach().clone();
    b.push_back(cl.set_requires_grad(mt::is_floating(t.dtype())));
  }
  ASSERT_TRUE(is_nhwc(b[0]));
  const Tensor out_a = f(a), out_b = f(b);
  EXPECT_TRUE(is_nhwc(out_b)) << "the output left channels-last";
  if (exact) EXPECT_EQ(to_doubles(out_b), to_doubles(out_a));
  else EXPECT_TRUE(all_close(out_b, to_doubles(out_a), tol));
  const Tensor g = random_tensor(out_a.shape(), out_a.dtype(), 99);
  (out_a * g).sum().backward();
  (out_b * g.contiguous(MemoryFormat::ChannelsLast)).sum().backward();
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].requires_grad()) continue;
    ASSERT_TRUE(b[i].grad().defined()) << "input " << i;
    if (exact) EXPECT_EQ(to_doubles(b[i].grad()), to_doubles(a[i].grad())) << "input " << i;
    else EXPECT_TRUE(all_close(b[i].grad(), to_doubles(a[i].grad()), tol)) << "input " << i;
  }
  EXPECT_TRUE(is_nhwc(b[0].grad())) << "the input gradient left channels-last";
  if (b.size() > 1 && b[1].dim() == 4) EXPECT_TRUE(b[1].grad().is_contiguous()) << "a weight gradient is NCHW";
}

}  // namespace

TEST(ChannelsLast, LayoutQueriesAndCopies) {
  const Tensor x = random_tensor({2, 3, 4, 5}, mt::kFloat32, 1);
  const Tensor cl = x.contiguous(MemoryFormat::ChannelsLast);
  EXPECT_EQ(cl.strides(), (mt::Shape{60, 1, 15, 3}));
  EXPECT_TRUE(cl.is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_FALSE(cl.is_contiguous());
  EXPECT_EQ(cl.suggest_memory_format(), MemoryFormat::ChannelsLast);
  EXPECT_EQ(x.suggest_memory_format(), MemoryFormat::Contiguous);
  EXPECT_EQ(to_doubles(cl), to_doubles(x));
  EXPECT_TRUE(cl.contiguous(MemoryFormat::ChannelsLast).is_same(cl)) << "no copy when already channels-last";
  EXPECT_TRUE(cl.contiguous().is_contiguous());
  // One channel fits both layouts: an NCHW tensor stays NCHW, a channels-last copy (its strides
  // say so) is channels-last, and feeds a channels-last convolution.
  const Tensor one = random_tensor({2, 1, 4, 5}, mt::kFloat32, 2);
  EXPECT_EQ(one.suggest_memory_format(), MemoryFormat::Contiguous);
  const Tensor one_cl = one.contiguous(MemoryFormat::ChannelsLast);
  EXPECT_EQ(one_cl.suggest_memory_format(), MemoryFormat::ChannelsLast);
  EXPECT_TRUE(one_cl.is_contiguous()) << "one channel: the same memory order";
  EXPECT_TRUE(is_nhwc(F::conv2d(one_cl, random_tensor({3, 1, 3, 3}, mt::kFloat32, 3))));
  // Casts and clones keep the layout; a transposed (non-dense) tensor still clones contiguous.
  EXPECT_TRUE(is_nhwc(cl.to(mt::kFloat16)));
  EXPECT_EQ(to_doubles(cl.to(mt::kFloat16)), to_doubles(x.to(mt::kFloat16)));
  EXPECT_TRUE(is_nhwc(cl.clone()));
  EXPECT_TRUE(x.transpose(2, 3).clone().is_contiguous());
  EXPECT_THROW(random_tensor({2, 3}, mt::kFloat32, 3).contiguous(MemoryFormat::ChannelsLast), mt::Error);
  const Tensor empty = Tensor::empty({2, 3, 4, 5}, mt::TensorOptions(mt::kFloat16), MemoryFormat::ChannelsLast);
  EXPECT_TRUE(is_nhwc(empty));
  EXPECT_EQ(empty.dtype(), mt::kFloat16);
}

TEST(ChannelsLast, ElementwiseOpsKeepTheLayoutAndTheValues) {
  const Tensor bias = random_tensor({1, 3, 1, 1}, mt::kFloat32, 5);
  check_same_in_both_layouts("relu + broadcast add", [&](const auto& in) { return mt::relu(in[0]) + bias; },
                             {random_tensor({2, 3, 4, 5}, mt::kFloat32, 4)}, true, tolerance_for(mt::kFloat32));
  check_same_in_both_layouts("mul by itself, scalar", [](const auto& in) { return (in[0] * in[0]) * 0.5; },
                             {random_tensor({2, 3, 4, 5}, mt::kBFloat16, 6)}, true, tolerance_for(mt::kBFloat16));
  // Mixed layouts give the right values whatever layout the output takes.
  const Tensor x = random_tensor({2, 3, 4, 5}, mt::kFloat32, 7), y = random_tensor({2, 3, 4, 5}, mt::kFloat32, 8);
  EXPECT_EQ(to_doubles(x.contiguous(MemoryFormat::ChannelsLast) + y), to_doubles(x + y));
  EXPECT_EQ(to_doubles(x + y.contiguous(MemoryFormat::ChannelsLast)), to_doubles(x + y));
}

TEST(ChannelsLast, CatAlongChannelsStaysChannelsLast) {
  const Tensor skip = random_tensor({2, 3, 4, 5}, mt::kFloat32, 30);
  check_same_in_both_layouts("cat", [&](const auto& in) { return mt::cat({in[0], mt::relu(in[0])}, 1); },
                             {random_tensor({2, 3, 4, 5}, mt::kFloat32, 31)}, true, tolerance_for(mt::kFloat32));
}

TEST(ChannelsLast, SumsOverTheBatchAndImageReadInMemoryOrder) {
  const Tensor x = random_tensor({3, 4, 5, 6}, mt::kFloat64, 9), cl = x.contiguous(MemoryFormat::ChannelsLast);
  for (const std::vector<int64_t>& dims : {std::vector<int64_t>{0, 2, 3}, {1}, {0}, {2, 3}, {}}) {
    EXPECT_TRUE(all_close(mt::sum(cl, dims), to_doubles(mt::sum(x, dims)), tolerance_for(mt::kFloat64)));
  }
}

TEST(ChannelsLast, ConvolutionsRunAndStayChannelsLast) {
  for (mt::DType dt : {mt::kFloat32, mt::kFloat16}) {
    const Tensor x = random_tensor({2, 4, 9, 7}, dt, 10), w = random_tensor({6, 2, 3, 3}, dt, 11);
    const Tensor b = random_tensor({6}, dt, 12);
    // The CPU kernels compute NCHW on converted copies: identical values.
    check_same_in_both_layouts(
        std::string("conv2d ") + mt::dtype_name(dt),
        [](const auto& in) { return F::conv2d(in[0], in[1], in[2], {2, 1}, {1, 2}, {1, 1}, 2); }, {x, w, b}, true,
        tolerance_for(dt));
    const Tensor wt = random_tensor({4, 3, 2, 2}, dt, 13), bt = random_tensor({3}, dt, 14);
    check_same_in_both_layouts(
        std::string("conv_transpose2d ") + mt::dtype_name(dt),
        [](const auto& in) { return F::conv_transpose2d(in[0], in[1], in[2], {2, 2}); }, {x, wt, bt}, true,
        tolerance_for(dt));
  }
  // A channels-last weight alone makes the convolution channels-last (PyTorch's rule).
  const Tensor x = random_tensor({1, 3, 5, 5}, mt::kFloat32, 15), w = random_tensor({2, 3, 3, 3}, mt::kFloat32, 16);
  const Tensor out = F::conv2d(x, w.contiguous(MemoryFormat::ChannelsLast));
  EXPECT_TRUE(is_nhwc(out));
  EXPECT_EQ(to_doubles(out), to_doubles(F::conv2d(x, w)));
}

TEST(ChannelsLast, BatchNormAndMaxPool) {
  for (mt::DType dt : {mt::kFloat32, mt::kFloat16}) {
    const Tensor x = random_tensor({3, 5, 6, 4}, dt, 20, -2, 3);
    const Tensor w = random_tensor({5}, mt::kFloat32, 21), b = random_tensor({5}, mt::kFloat32, 22);
    Tensor rm_a = mt::zeros({5}), rv_a = mt::ones({5}), rm_b = mt::zeros({5}), rv_b = mt::ones({5});
    int call = 0;
    // Statistics sum in another order (pixels of a channel are strided): equal within rounding.
    check_same_in_both_layouts(
        std::string("batch_norm ") + mt::dtype_name(dt),
        [&](const auto& in) {
          Tensor& rm = call == 0 ? rm_a : rm_b;
          Tensor& rv = call++ == 0 ? rv_a : rv_b;
          return F::batch_norm(in[0], rm, rv, in[1], in[2], true, 0.1, 1e-5);
        },
        {x, w, b}, false, tolerance_for(dt));
    EXPECT_TRUE(all_close(rm_b, to_doubles(rm_a), tolerance_for(mt::kFloat32)));
    EXPECT_TRUE(all_close(rv_b, to_doubles(rv_a), tolerance_for(mt::kFloat32)));
    check_same_in_both_layouts(
        std::string("max_pool2d ") + mt::dtype_name(dt), [](const auto& in) { return F::max_pool2d(in[0], 2); },
        {random_tensor({2, 3, 7, 6}, dt, 23)}, true, tolerance_for(dt));
  }
  const Tensor x = random_tensor({2, 3, 6, 6}, mt::kFloat32, 24);
  const auto [out, idx] = F::max_pool2d_with_indices(x.contiguous(MemoryFormat::ChannelsLast), 3, 2, 1);
  const auto [out_ref, idx_ref] = F::max_pool2d_with_indices(x, 3, 2, 1);
  EXPECT_TRUE(is_nhwc(idx));
  EXPECT_EQ(to_doubles(idx), to_doubles(idx_ref)) << "indices are positions in the [H, W] plane in both layouts";
}

TEST(ChannelsLast, EveryOtherOpReadsItsValuesNotItsLayout) {
  // Ops that do not keep the layout must still read a channels-last input correctly (their
  // kernels take contiguous tensors, so they convert): each gives the values it gives on NCHW.
  using Op = std::function<Tensor(const Tensor&)>;
  const Tensor w = random_tensor({6}, mt::kFloat32, 41), b = random_tensor({6}, mt::kFloat32, 42);
  const Tensor target = mt::randint(0, 6, {2, 4, 5}, mt::TensorOptions(mt::kInt64));
  const Tensor other = random_tensor({2, 6, 5, 3}, mt::kFloat32, 43);
  const std::vector<std::pair<std::string, Op>> ops = {
      {"group_norm", [&](const Tensor& x) { return F::group_norm(x, 3, w, b); }},
      {"layer_norm", [](const Tensor& x) { return F::layer_norm(x, {4, 5}); }},
      {"interpolate nearest", [](const Tensor& x) {
         return F::interpolate(x, F::InterpolateOptions().size(7).mode(F::InterpolateMode::Nearest)); }},
      {"interpolate bilinear", [](const Tensor& x) {
         return F::interpolate(x, F::InterpolateOptions().size(9).mode(F::InterpolateMode::Bilinear)); }},
      {"softmax dim 1", [](const Tensor& x) { return mt::softmax(x, 1); }},
      {"log_softmax dim 3", [](const Tensor& x) { return mt::log_softmax(x, 3); }},
      {"mean over image", [](const Tensor& x) { return mt::mean(x, {2, 3}); }},
      {"max over channels", [](const Tensor& x) { return std::get<0>(x.max(1)); }},
      {"argmax over channels", [](const Tensor& x) { return x.argmax(1).to(mt::kFloat32); }},
      {"cross_entropy", [&](const Tensor& x) { return F::cross_entropy(x, target); }},
      {"mse_loss", [](const Tensor& x) { return F::mse_loss(x, mt::zeros_like(x)); }},
      {"reshape", [](const Tensor& x) { return x.reshape({2, -1}); }},
      {"flatten", [](const Tensor& x) { return x.flatten(1); }},
      {"batched matmul", [&](const Tensor& x) { return mt::matmul(x, other); }},
      {"linear over the last dim", [](const Tensor& x) { return F::linear(x, mt::ones({3, 5})); }},
      {"narrow channels", [](const Tensor& x) { return x.narrow(1, 1, 3) * 2.0; }},
      {"dropout, eval", [](const Tensor& x) { return F::dropout(x, 0.5, false); }},
  };
  const Tensor x = random_tensor({2, 6, 4, 5}, mt::kFloat32, 40), cl = x.contiguous(MemoryFormat::ChannelsLast);
  for (const auto& [name, op] : ops) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(all_close(op(cl), to_doubles(op(x)), tolerance_for(mt::kFloat32)));
  }
}
