// The model ops' autocast policies (PyTorch's CUDA lists, docs/REFERENCE_AMP.md) and
// their dispatch contract: each op offers every floating tensor argument to the pre-dispatch hook
// exactly once, at its outermost call, and runs correctly on what the hook hands back. A small
// stand-in for autocast's hook (cast to fp16 for LowerPrecision, to fp32 for Float32) checks the
// dtypes that come out and that fp32 leaves still get fp32 gradients.
#include <vector>

#include "mixtrain/ops/dispatch.h"
#include "ops/op_reference.h"

namespace mt = mixtrain;
namespace F = mixtrain::nn::functional;
namespace ops = mixtrain::ops;
using mt::amp::CastPolicy;
using namespace mixtrain::testing;

namespace {

struct Offer {
  ops::OpId op;
  int num_tensors;
};
std::vector<Offer> g_offers;

void stand_in_hook(ops::DispatchArgs& a) {
  ops::HookExcludeGuard no_reentry;  // the casts below are ops too
  g_offers.push_back({a.op, a.num_tensors});
  const CastPolicy p = ops::policy(a.op);
  for (int i = 0; i < a.num_tensors; ++i) {
    mt::Tensor& t = *a.tensors[i];
    if (!t.defined() || !mt::is_floating(t.dtype()) || t.dtype() == mt::kFloat64) continue;
    if (p == CastPolicy::LowerPrecision && t.dtype() != mt::kFloat16) t = t.to(mt::kFloat16);
    if (p == CastPolicy::Float32 && mt::is_half(t.dtype())) t = t.to(mt::kFloat32);
  }
}

class HookScope {
 public:
  HookScope() : prev_(ops::pre_dispatch_hook()) {
    g_offers.clear();
    ops::set_pre_dispatch_hook(stand_in_hook);
    ops::set_hook_active_for_thread(true);
  }
  ~HookScope() {
    ops::set_hook_active_for_thread(false);
    ops::set_pre_dispatch_hook(prev_);
  }

 private:
  ops::PreDispatchHook prev_;
};

// The single offer an op call made (nested ops must not be offered again).
::testing::AssertionResult offered_once(ops::OpId op, int num_tensors) {
  if (g_offers.size() != 1)
    return ::testing::AssertionFailure() << g_offers.size() << " offers, expected one (" << ops::op_name(op) << ")";
  if (g_offers[0].op != op || g_offers[0].num_tensors != num_tensors)
    return ::testing::AssertionFailure() << "offered " << ops::op_name(g_offers[0].op) << " with "
                                         << g_offers[0].num_tensors << " tensors, expected " << ops::op_name(op)
                                         << " with " << num_tensors;
  return ::testing::AssertionSuccess();
}

mt::Tensor leaf(const mt::Shape& shape, uint64_t seed) { return random_tensor(shape, mt::kFloat32, seed).set_requires_grad(true); }

}  // namespace

TEST(ModelOpPolicies, DefaultsFollowPyTorchCudaLists) {
  const std::pair<ops::OpId, CastPolicy> expected[] = {
      {ops::OpId::conv2d, CastPolicy::LowerPrecision},
      {ops::OpId::conv_transpose2d, CastPolicy::LowerPrecision},
      {ops::OpId::scaled_dot_product_attention, CastPolicy::LowerPrecision},
      {ops::OpId::layer_norm, CastPolicy::Float32},
      {ops::OpId::group_norm, CastPolicy::Float32},
      {ops::OpId::upsample_nearest2d, CastPolicy::Float32},
      {ops::OpId::upsample_bilinear2d, CastPolicy::Float32},
      {ops::OpId::batch_norm, CastPolicy::Passthrough},
      {ops::OpId::max_pool2d, CastPolicy::Passthrough},
      {ops::OpId::embedding, CastPolicy::Passthrough},
      {ops::OpId::cat, CastPolicy::Passthrough},
      {ops::OpId::stack, CastPolicy::Passthrough},
      {ops::OpId::split, CastPolicy::Passthrough},
      {ops::OpId::norm, CastPolicy::Float32},  // torch.norm: fp32_append_dtype
      {ops::OpId::clamp, CastPolicy::Passthrough},
      {ops::OpId::clamp_min, CastPolicy::Passthrough},
      {ops::OpId::clamp_max, CastPolicy::Passthrough},
      {ops::OpId::masked_fill, CastPolicy::Passthrough},
      {ops::OpId::topk, CastPolicy::Passthrough},
      {ops::OpId::all, CastPolicy::Passthrough},
      {ops::OpId::any, CastPolicy::Passthrough},
  };
  for (const auto& [op, policy] : expected) {
    EXPECT_EQ(ops::default_policy(op), policy) << ops::op_name(op);
    ops::OpId back;
    ASSERT_TRUE(ops::op_from_name(ops::op_name(op), &back)) << ops::op_name(op);
    EXPECT_EQ(back, op);
  }
}

TEST(ModelOpPolicies, LowerPrecisionOpsRunInFp16AndLeavesGetFp32Gradients) {
  mt::Tensor x = leaf({1, 2, 5, 5}, 1), w = leaf({3, 2, 3, 3}, 2), b = leaf({3}, 3);
  mt::Tensor y;
  {
    HookScope hook;
    y = F::conv2d(x, w, b, 1, 1);
    EXPECT_TRUE(offered_once(ops::OpId::conv2d, 3));
  }
  EXPECT_EQ(y.dtype(), mt::kFloat16);
  // The same as casting by hand.
  EXPECT_EQ(to_doubles(y), to_doubles(F::conv2d(x.to(mt::kFloat16), w.to(mt::kFloat16), b.to(mt::kFloat16), 1, 1)));
  y.sum().backward();
  for (const mt::Tensor* t : {&x, &w, &b}) EXPECT_EQ(t->grad().dtype(), mt::kFloat32);

  mt::Tensor wt = leaf({2, 3, 2, 2}, 4);
  {
    HookScope hook;
    EXPECT_EQ(F::conv_transpose2d(x, wt, {}, 2).dtype(), mt::kFloat16);
    EXPECT_TRUE(offered_once(ops::OpId::conv_transpose2d, 3));
  }
  // Attention: q, k, v and the float mask are offered; the matmuls and softmax inside are not
  // offered again (they would be cast twice), and the result is fp16.
  mt::Tensor q = leaf({2, 3, 4}, 5), k = leaf({2, 5, 4}, 6), v = leaf({2, 5, 4}, 7);
  mt::Tensor mask = random_tensor({3, 5}, mt::kFloat32, 8, -1, 0);
  {
    HookScope hook;
    mt::Tensor a = F::scaled_dot_product_attention(q, k, v, mask);
    EXPECT_TRUE(offered_once(ops::OpId::scaled_dot_product_attention, 4));
    EXPECT_EQ(a.dtype(), mt::kFloat16);
    a.sum().backward();
  }
  EXPECT_EQ(q.grad().dtype(), mt::kFloat32);

  // linear_relu is linear to autocast: offered once, as linear, with the result of casting by hand.
  mt::Tensor xl = leaf({3, 4}, 9), wl = leaf({2, 4}, 10), bl = leaf({2}, 11);
  mt::Tensor r;
  {
    HookScope hook;
    r = mt::linear_relu(xl, wl, bl);
    EXPECT_TRUE(offered_once(ops::OpId::linear, 3));
  }
  EXPECT_EQ(r.dtype(), mt::kFloat16);
  const mt::Tensor by_hand = mt::relu(mt::linear(xl.to(mt::kFloat16), wl.to(mt::kFloat16), bl.to(mt::kFloat16)));
  EXPECT_EQ(to_doubles(r), to_doubles(by_hand));
  r.sum().backward();
  for (const mt::Tensor* t : {&xl, &wl, &bl}) EXPECT_EQ(t->grad().dtype(), mt::kFloat32);
}

TEST(ModelOpPolicies, Float32OpsUpcastHalfInputsAndPassthroughOpsKeepThem) {
  const mt::Tensor xh = random_tensor({2, 4, 3, 3}, mt::kFloat16, 10);
  const mt::Tensor w = random_tensor({4}, mt::kFloat32, 11), b = random_tensor({4}, mt::kFloat32, 12);
  const mt::Tensor xf = xh.to(mt::kFloat32), table = xh.reshape({-1, 3});
  const mt::Tensor idx = mt::from_vector(std::vector<int64_t>{1, 0}, {2});
  HookScope hook;
  EXPECT_EQ(F::group_norm(xh, 2, w, b).dtype(), mt::kFloat32);
  EXPECT_TRUE(offered_once(ops::OpId::group_norm, 3));
  g_offers.clear();
  EXPECT_EQ(F::layer_norm(xh, {3, 3}).dtype(), mt::kFloat32);
  EXPECT_TRUE(offered_once(ops::OpId::layer_norm, 3));
  g_offers.clear();
  EXPECT_EQ(F::interpolate(xh, F::InterpolateOptions().scale_factor(2)).dtype(), mt::kFloat32);
  EXPECT_TRUE(offered_once(ops::OpId::upsample_nearest2d, 1));
  g_offers.clear();
  EXPECT_EQ(F::interpolate(xh, F::InterpolateOptions().size(5).mode(F::InterpolateMode::Bilinear)).dtype(),
            mt::kFloat32);
  EXPECT_TRUE(offered_once(ops::OpId::upsample_bilinear2d, 1));
  g_offers.clear();
  // batch_norm keeps the half activation; its fp32 running statistics stay fp32.
  mt::Tensor rm = mt::zeros({4}), rv = mt::ones({4});
  EXPECT_EQ(F::batch_norm(xh, rm, rv, w, b, true).dtype(), mt::kFloat16);
  EXPECT_TRUE(offered_once(ops::OpId::batch_norm, 3));
  EXPECT_EQ(rm.dtype(), mt::kFloat32);
  g_offers.clear();
  EXPECT_EQ(F::max_pool2d(xh, 2).dtype(), mt::kFloat16);
  EXPECT_TRUE(offered_once(ops::OpId::max_pool2d, 1));
  g_offers.clear();
  EXPECT_EQ(F::embedding(idx, table).dtype(), mt::kFloat16);
  EXPECT_TRUE(offered_once(ops::OpId::embedding, 1));
  g_offers.clear();
  EXPECT_EQ(mt::cat({xh, xh, xf}).dtype(), mt::kFloat32);  // ordinary promotion
  EXPECT_TRUE(offered_once(ops::OpId::cat, 3));
  // The ops a libtorch user reaches for next: norm runs in fp32 (its sums would lose range in
  // fp16), the others keep the half dtype; each offers its tensors once.
  g_offers.clear();
  EXPECT_EQ(mt::norm(xh, 2, {1}).dtype(), mt::kFloat32);
  EXPECT_TRUE(offered_once(ops::OpId::norm, 1));
  g_offers.clear();
  EXPECT_EQ(mt::clamp(xh, -0.5, 0.5).dtype(), mt::kFloat16);
  EXPECT_TRUE(offered_once(ops::OpId::clamp, 1));
  g_offers.clear();
  EXPECT_EQ(mt::clamp(xh, std::optional<mt::Tensor>(xf), std::nullopt).dtype(), mt::kFloat32);  // promotion
  EXPECT_TRUE(offered_once(ops::OpId::clamp, 3));
  g_offers.clear();
  EXPECT_EQ(mt::clamp_min(xh, 0).dtype(), mt::kFloat16);
  EXPECT_TRUE(offered_once(ops::OpId::clamp_min, 1));
  g_offers.clear();
  EXPECT_EQ(mt::clamp_max(xh, 0).dtype(), mt::kFloat16);
  EXPECT_TRUE(offered_once(ops::OpId::clamp_max, 1));
  g_offers.clear();
  EXPECT_EQ(mt::masked_fill(xh, xh.gt(0.0), 1.0).dtype(), mt::kFloat16);
  EXPECT_TRUE(offered_once(ops::OpId::masked_fill, 2));  // the input and the value
  g_offers.clear();
  EXPECT_EQ(std::get<0>(mt::topk(xh, 2)).dtype(), mt::kFloat16);
  EXPECT_TRUE(offered_once(ops::OpId::topk, 1));
  g_offers.clear();
  EXPECT_EQ(mt::all(xh).dtype(), mt::kBool);
  EXPECT_TRUE(offered_once(ops::OpId::all, 1));
  g_offers.clear();
  EXPECT_EQ(mt::any(xh, {1}).dtype(), mt::kBool);
  EXPECT_TRUE(offered_once(ops::OpId::any, 1));
}
