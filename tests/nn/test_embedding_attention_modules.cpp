// Embedding and MultiheadAttention: PyTorch's names, shapes and counts; forward against an fp64
// reference written with loops; padding_idx; masks and layouts.
#include <cmath>
#include <limits>

#include "support/testing.h"

namespace mt = mixtrain;
using mt::Tensor;
using mt::testing::all_close;
using mt::testing::names_of;
using mt::testing::random_tensor;
using mt::testing::to_doubles;
using mt::testing::tolerance_for;

namespace {

// Multi-head attention of batch-first x [N, L, E] in fp64 loops. hidden(i, j): key j hidden
// from query i.
template <class Hidden>
std::vector<double> mha_reference(const Tensor& x, const mt::nn::MultiheadAttention& m, int64_t heads, Hidden hidden) {
  const auto xv = to_doubles(x), w = to_doubles(m->in_proj_weight), b = to_doubles(m->in_proj_bias);
  const auto ow = to_doubles(m->out_proj->weight), ob = to_doubles(m->out_proj->bias);
  const int64_t n = x.size(0), l = x.size(1), e = x.size(2), d = e / heads;
  auto at = [](const std::vector<double>& v, int64_t i) { return v[static_cast<size_t>(i)]; };
  // proj[p][(i * L + t) * E + o] for p = q, k, v
  std::vector<std::vector<double>> proj(3, std::vector<double>(static_cast<size_t>(n * l * e)));
  for (int p = 0; p < 3; ++p)
    for (int64_t r = 0; r < n * l; ++r)
      for (int64_t o = 0; o < e; ++o) {
        double s = at(b, p * e + o);
        for (int64_t k = 0; k < e; ++k) s += at(xv, r * e + k) * at(w, (p * e + o) * e + k);
        proj[static_cast<size_t>(p)][static_cast<size_t>(r * e + o)] = s;
      }
  std::vector<double> merged(static_cast<size_t>(n * l * e)), out(merged.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t q = 0; q < l; ++q) {
        std::vector<double> score(static_cast<size_t>(l), -std::numeric_limits<double>::infinity());
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t k = 0; k < l; ++k) {
          if (hidden(q, k)) continue;
          double s = 0;
          for (int64_t c = 0; c < d; ++c)
            s += at(proj[0], (i * l + q) * e + h * d + c) * at(proj[1], (i * l + k) * e + h * d + c);
          score[static_cast<size_t>(k)] = s / std::sqrt(static_cast<double>(d));
          mx = std::max(mx, score[static_cast<size_t>(k)]);
        }
        double z = 0;
        for (auto& s : score) z += (s = std::exp(s - mx));
        for (int64_t c = 0; c < d; ++c) {
          double acc = 0;
          for (int64_t k = 0; k < l; ++k) acc += score[static_cast<size_t>(k)] / z * at(proj[2], (i * l + k) * e + h * d + c);
          merged[static_cast<size_t>((i * l + q) * e + h * d + c)] = acc;
        }
      }
  for (int64_t r = 0; r < n * l; ++r)
    for (int64_t o = 0; o < e; ++o) {
      double s = at(ob, o);
      for (int64_t k = 0; k < e; ++k) s += at(merged, r * e + k) * at(ow, o * e + k);
      out[static_cast<size_t>(r * e + o)] = s;
    }
  return out;
}

}  // namespace

TEST(EmbeddingModule, LooksUpRowsAndHonoursPaddingIdx) {
  mt::manual_seed(1);
  mt::nn::Embedding emb(mt::nn::EmbeddingOptions(10, 4).padding_idx(-1));
  EXPECT_EQ(names_of(emb.state_dict()), std::vector<std::string>{"weight"});
  EXPECT_EQ(emb->weight.shape(), (mt::Shape{10, 4}));
  ASSERT_TRUE(emb->padding_idx().has_value());
  EXPECT_EQ(*emb->padding_idx(), 9);
  const auto w = to_doubles(emb->weight);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(w[36 + i], 0.0);  // the padding row starts at zero
  const Tensor idx = mt::from_vector(std::vector<int64_t>{3, 9, 0, 3, 7, 9}, {2, 3});
  const Tensor y = emb(idx);
  EXPECT_EQ(y.shape(), (mt::Shape{2, 3, 4}));
  const auto yv = to_doubles(y);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(yv[i], w[12 + i]);       // row 3
    EXPECT_EQ(yv[16 + i], w[28 + i]);  // row 7
  }
  y.sum().backward();
  const auto g = to_doubles(emb->weight.grad());
  EXPECT_EQ(g[12], 2.0);  // row 3 used twice
  EXPECT_EQ(g[36], 0.0);  // padding row gets no gradient
  EXPECT_THROW(mt::nn::Embedding(mt::nn::EmbeddingOptions(10, 4).padding_idx(10)), mt::Error);
  EXPECT_THROW(emb(mt::zeros({2})), mt::Error);  // float indices
}

TEST(EmbeddingModule, DrawsStandardNormal) {
  mt::manual_seed(2);
  mt::nn::Embedding emb(1000, 64);
  double s = 0, s2 = 0;
  for (double v : to_doubles(emb->weight)) s += v, s2 += v * v;
  const double n = 64000;
  EXPECT_NEAR(s / n, 0.0, 0.02);
  EXPECT_NEAR(std::sqrt(s2 / n), 1.0, 0.02);
}

TEST(MultiheadAttentionModule, NamesAndCounts) {
  mt::nn::MultiheadAttention mha(mt::nn::MultiheadAttentionOptions(8, 2).batch_first(true));
  EXPECT_EQ(names_of(mha.state_dict()),
            (std::vector<std::string>{"in_proj_bias", "in_proj_weight", "out_proj.bias", "out_proj.weight"}));
  int64_t count = 0;
  for (const auto& p : mha.parameters()) count += p.numel();
  EXPECT_EQ(count, 4 * 8 * 8 + 4 * 8);  // PyTorch: 4 E^2 + 4 E
  EXPECT_EQ(to_doubles(mha->in_proj_bias), std::vector<double>(24, 0.0));
  EXPECT_EQ(to_doubles(mha->out_proj->bias), std::vector<double>(8, 0.0));
  // xavier_uniform_ on [24, 8]: bound sqrt(6 / 32).
  double mx = 0;
  for (double v : to_doubles(mha->in_proj_weight)) mx = std::max(mx, std::abs(v));
  EXPECT_LE(mx, std::sqrt(6.0 / 32.0));
  EXPECT_THROW(mt::nn::MultiheadAttention(10, 3), mt::Error);
}

TEST(MultiheadAttentionModule, MatchesFp64ReferenceInBothLayouts) {
  mt::manual_seed(3);
  mt::nn::MultiheadAttention mha(mt::nn::MultiheadAttentionOptions(8, 2).batch_first(true));
  {
    // Non-zero biases so a bias bug shows.
    mt::NoGradGuard g;
    mha->in_proj_bias.copy_(random_tensor({24}, mt::kFloat32, 4));
    mha->out_proj->bias.copy_(random_tensor({8}, mt::kFloat32, 5));
  }
  const Tensor x = random_tensor({2, 5, 8}, mt::kFloat32, 6);
  const auto none = [](int64_t, int64_t) { return false; };
  const auto ref = mha_reference(x, mha, 2, none);
  EXPECT_TRUE(all_close(mha(x), ref, tolerance_for(mt::kFloat32)));
  // Separate query/key/value tensors take the sliced-projection path: same result.
  const Tensor x_copy = x.clone();
  EXPECT_TRUE(all_close(mha(x, x_copy, x_copy.clone()), ref, tolerance_for(mt::kFloat32)));

  // Causal, and the same through a bool mask (true = hidden, MultiheadAttention's meaning).
  const auto causal = [](int64_t q, int64_t k) { return k > q; };
  const auto causal_ref = mha_reference(x, mha, 2, causal);
  EXPECT_TRUE(all_close(mha->forward(x, x, x, Tensor(), /*is_causal=*/true), causal_ref, tolerance_for(mt::kFloat32)));
  std::vector<float> hide;
  for (int q = 0; q < 5; ++q)
    for (int k = 0; k < 5; ++k) hide.push_back(k > q ? 1.f : 0.f);
  const Tensor mask = mt::from_vector(hide, {5, 5}, mt::kBool);
  EXPECT_TRUE(all_close(mha->forward(x, x, x, mask), causal_ref, tolerance_for(mt::kFloat32)));

  // Sequence-first layout: the same module on [L, N, E].
  mt::nn::MultiheadAttention seq_first(8, 2);
  seq_first.load_state_dict(mha.state_dict());
  const Tensor y = seq_first(x.transpose(0, 1).contiguous());
  EXPECT_EQ(y.shape(), (mt::Shape{5, 2, 8}));
  EXPECT_TRUE(all_close(y.transpose(0, 1).contiguous(), ref, tolerance_for(mt::kFloat32)));
}

TEST(MultiheadAttentionModule, GradientsReachEveryParameter) {
  mt::nn::MultiheadAttention mha(mt::nn::MultiheadAttentionOptions(8, 4).batch_first(true));
  mha(random_tensor({2, 3, 8}, mt::kFloat32, 7)).pow(2.0).sum().backward();
  for (const auto& [name, p] : mha.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    double mx = 0;
    for (double v : to_doubles(p.grad())) mx = std::max(mx, std::abs(v));
    EXPECT_GT(mx, 0) << name;
  }
}
