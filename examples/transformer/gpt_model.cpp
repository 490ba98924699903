#include "transformer/gpt_model.h"

namespace mixtrain::examples {

namespace {

// x + branch. The branch output (a dropout's or the output projection's) is saved by no backward,
// so the sum can go into its memory (add_, one activation less) when that rounds the same: under
// autocast the branch is half while the residual stream is fp32, and there the sum stays out of
// place in fp32. IEEE addition commutes, so branch + x is x + branch bit for bit.
Tensor residual_add(const Tensor& x, Tensor branch) {
  if (branch.dtype() != x.dtype()) return x + branch;
  return branch.add_(x);
}

}  // namespace

GptBlockImpl::GptBlockImpl(const GptOptions& o) : Module("GptBlock") {
  ln1_ = register_module("ln1", nn::LayerNorm(Shape{o.width}));
  attn_ = register_module(
      "attn", nn::MultiheadAttention(nn::MultiheadAttentionOptions(o.width, o.heads).dropout(o.dropout).batch_first(true)));
  ln2_ = register_module("ln2", nn::LayerNorm(Shape{o.width}));
  fc1_ = register_module("fc1", nn::Linear(o.width, 4 * o.width));
  fc2_ = register_module("fc2", nn::Linear(4 * o.width, o.width));
  // In place: it masks a fresh output (attention's or fc2's) that no backward saved.
  drop_ = register_module("drop", nn::Dropout(nn::DropoutOptions(o.dropout).inplace(true)));
}

Tensor GptBlockImpl::forward(const Tensor& x) {
  const Tensor h = ln1_(x);
  const Tensor a = residual_add(x, drop_(attn_->forward(h, h, h, Tensor(), /*is_causal=*/true)));
  return residual_add(a, drop_(fc2_(gelu(fc1_(ln2_(a))))));
}

GptImpl::GptImpl(const GptOptions& o) : Module("Gpt"), options_(o) {
  MT_CHECK(o.vocab > 0 && o.context > 0 && o.layers > 0 && o.width > 0 && o.heads > 0 && o.width % o.heads == 0,
           "Gpt: bad options: vocab ", o.vocab, ", context ", o.context, ", layers ", o.layers, ", width ", o.width,
           ", heads ", o.heads, " (width must be a multiple of heads)");
  tok_emb_ = register_module("tok_emb", nn::Embedding(o.vocab, o.width));
  pos_emb_ = register_module("pos_emb", nn::Embedding(o.context, o.width));
  blocks_ = register_module("blocks", nn::ModuleList());
  for (int64_t i = 0; i < o.layers; ++i) blocks_->push_back(GptBlock(o));
  ln_f_ = register_module("ln_f", nn::LayerNorm(Shape{o.width}));
  head_ = register_module("head", nn::Linear(o.width, o.vocab));
}

Tensor GptImpl::forward(const Tensor& tokens) {
  MT_CHECK(tokens.dim() == 2 && tokens.dtype() == kInt64 && tokens.size(1) <= options_.context,
           "Gpt: expected int64 tokens [N, T] with T <= context = ", options_.context, ", got ", tokens.summary());
  const Tensor positions = arange(static_cast<double>(tokens.size(1)), TensorOptions(kInt64).device(tokens.device()));
  // Sequenced: the operands of + are evaluated in an unspecified order (gcc and clang differ),
  // and the dry run's trace, hence `mixtrain memory`'s reserved bytes, follows allocation order.
  Tensor x;
  {
    const Tensor pos = pos_emb_(positions);  // freed after the sum, as a temporary would be
    x = tok_emb_(tokens) + pos;
  }
  for (const auto& block : *blocks_) {
    if (options_.checkpoint_activations) {
      // The block (a shared handle) is called again in backward, after this loop.
      x = nn::checkpoint([block](const Tensor& in) { return block->forward(in); }, x);
    } else {
      x = block->forward(x);
    }
  }
  return head_(ln_f_(x));
}

int64_t GptImpl::non_embedding_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n - tok_emb_->weight.numel() - pos_emb_->weight.numel();
}

}  // namespace mixtrain::examples
