// DistributedDataParallel's gradient buckets and their reduction during backward.
#include "distributed/ddp_reducer.h"
#include "distributed/internal.h"

#include <chrono>
#include <map>
#include <set>
#include <sstream>
#include <unordered_set>

#include "backends/elementwise.h"
#include "mixtrain/autograd/node.h"
#include "mixtrain/base/error.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/core/factories.h"

namespace mixtrain::nn {

DistributedDataParallel::Reducer::Reducer(DistributedDataParallel& owner,
                                          std::vector<std::pair<std::string, Tensor>> named)
    : ddp(owner) {
  for (auto& [name, p] : named) {
    if (!p.requires_grad()) continue;
    names.push_back(name);
    params.push_back(p);
  }
  build_buckets();
  for (size_t i = 0; i < params.size(); ++i)
    hook_ids.push_back(params[i].register_post_accumulate_grad_hook([this, i](const Tensor&) { mark_ready(i); }));
}

DistributedDataParallel::Reducer::~Reducer() {
  for (size_t i = 0; i < params.size(); ++i) params[i].remove_post_accumulate_grad_hook(hook_ids[i]);
  for (Bucket& b : buckets)
    if (b.launched && b.work.valid()) {
      try {
        b.work.wait();
      } catch (...) {  // the group already reported it; a destructor must not throw
      }
    }
}

std::vector<std::vector<size_t>> ddp_bucket_layout(const std::vector<Tensor>& params,
                                                   const DistributedDataParallelOptions& options) {
  // Reverse registration order: the last layers' gradients are ready first in backward. One open
  // bucket per (dtype, device); the first of each closes early so communication starts soon. As in
  // PyTorch, a bucket closes once it reaches its cap, the gradient that crosses it included: a
  // large gradient then ends the bucket it arrives in instead of opening the next one, where it
  // would wait for the earlier layers (a small model would reduce nearly everything after backward).
  const auto cap = static_cast<size_t>(options.bucket_cap_mb() * 1024 * 1024);
  const auto first_cap = static_cast<size_t>(options.first_bucket_mb() * 1024 * 1024);
  using Key = std::tuple<int, int, int>;
  std::map<Key, size_t> open;  // key -> index into the buckets
  std::set<Key> started;       // keys that have had a bucket
  std::vector<std::vector<size_t>> buckets;
  std::vector<size_t> bytes, limit;
  for (size_t k = params.size(); k-- > 0;) {
    const Tensor& p = params[k];
    const Key key{static_cast<int>(p.dtype()), static_cast<int>(p.device().type), p.device().index};
    auto it = open.find(key);
    if (it == open.end()) {
      buckets.emplace_back();
      bytes.push_back(0);
      limit.push_back(started.insert(key).second ? first_cap : cap);
      it = open.emplace(key, buckets.size() - 1).first;
    }
    const size_t i = it->second;
    buckets[i].push_back(k);
    bytes[i] += p.nbytes();
    if (bytes[i] >= limit[i]) open.erase(it);
  }
  return buckets;
}

void DistributedDataParallel::Reducer::build_buckets() {
  bucket_of.assign(params.size(), 0);
  for (const std::vector<size_t>& members : ddp_bucket_layout(params, ddp.options_)) {
    Bucket& b = buckets.emplace_back();
    for (size_t k : members) {
      b.offsets.push_back(b.params.empty() ? 0 : b.offsets.back() + params[b.params.back()].numel());
      b.params.push_back(k);
      bucket_of[k] = buckets.size() - 1;
    }
  }
  allocate_buckets();
}

void DistributedDataParallel::Reducer::allocate_buckets() {
  views.resize(params.size());
  for (Bucket& b : buckets) {
    const Tensor& first = params[b.params.front()];
    int64_t total = b.offsets.back() + params[b.params.back()].numel();
    // ZeRO: equal chunks, one per rank (the padding is reduced as zeros and never read).
    if (shard_world > 0) total = (total + shard_world - 1) / shard_world * shard_world;
    b.flat = zeros({total}, first.options());
    b.comm = Tensor();
    if (ddp.options_.compression() != DType::Float32 && is_floating(first.dtype()))
      b.comm = Tensor::empty({total}, first.options().dtype(ddp.options_.compression()));
    for (size_t j = 0; j < b.params.size(); ++j) {
      const Tensor& p = params[b.params[j]];
      views[b.params[j]] = b.flat.narrow(0, b.offsets[j], p.numel()).view(p.shape());
    }
  }
  ready.assign(params.size(), false);
}

void DistributedDataParallel::Reducer::shard(int world, int rank) {
  MT_CHECK(!active, "DistributedDataParallel: cannot shard the gradients in the middle of a backward");
  shard_world = world;
  shard_rank = rank;
  for (Tensor& p : params) p.set_grad(Tensor());  // views of the buckets about to be replaced
  allocate_buckets();
}

std::vector<std::string> DistributedDataParallel::Reducer::unready_names() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < params.size(); ++i)
    if (!ready[i]) out.push_back(names[i]);
  return out;
}

void DistributedDataParallel::Reducer::prepare() {
  if (active) {
    std::ostringstream os;
    for (const auto& n : unready_names()) os << " " << n;
    active = false;
    MT_ERROR("DistributedDataParallel: the previous backward did not produce a gradient for parameters", os.str(),
             ", so their buckets were never reduced (the ranks are now out of step). If some parameters are ",
             "legitimately unused in a step, construct with DistributedDataParallelOptions().",
             "find_unused_parameters(true)");
  }
  // Gradients are left as they are: mark_ready moves each one into its view, scaled by this
  // rank's weight, in one pass (no zero-fill beforehand, no separate scaling of the bucket).
  ready.assign(params.size(), false);
  for (Bucket& b : buckets) {
    b.pending = b.params.size();
    b.launched = false;
  }
  next_launch = 0;
}

void DistributedDataParallel::Reducer::mark_unused(const Tensor& output) {
  std::unordered_set<autograd::Node*> seen;
  std::vector<autograd::Node*> stack;
  if (output.defined() && output.grad_fn()) stack.push_back(output.grad_fn().get()), seen.insert(stack.back());
  while (!stack.empty()) {
    autograd::Node* n = stack.back();
    stack.pop_back();
    for (const auto& e : n->next_edges)
      if (e.valid() && seen.insert(e.node.get()).second) stack.push_back(e.node.get());
  }
  for (size_t i = 0; i < params.size(); ++i) {
    auto acc = params[i].impl()->grad_accumulator.lock();
    if (!acc || !seen.count(acc.get())) mark_ready(i);
  }
}

void DistributedDataParallel::Reducer::mark_ready(size_t i) {
  if (!ddp.sync_ || ready[i]) return;
  active = true;
  ready[i] = true;
  move_into_view(i);
  Bucket& b = buckets[bucket_of[i]];
  if (--b.pending > 0) return;
  // Launch in bucket order on every rank, whatever order the buckets became ready in.
  while (next_launch < buckets.size() && buckets[next_launch].pending == 0) launch(buckets[next_launch++]);
  if (next_launch == buckets.size()) finish();
}

void DistributedDataParallel::Reducer::move_into_view(size_t i) {
  // This rank's share of the sum, taken before the sum (and before narrowing, when compressed, so
  // that the sum of shares stays in the narrow type's range); nothing to take when the loss was
  // already scaled by it before backward (scale_loss).
  NoGradGuard no_grad;
  const double w = ddp.loss_scaled_ ? 1.0 : ddp.weight_;
  Tensor& view = views[i];
  const Tensor g = params[i].grad();
  if (!g.defined()) {
    view.zero_();  // unused in this backward (find_unused_parameters)
  } else if (g.is_same(view)) {
    if (w != 1.0) view.mul_(w);  // accumulated in place: kept by zero_grad(set_to_none=false)
  } else if (w == 1.0) {
    view.copy_(g);
  } else {
    backends::binary_scalar(g, backends::BinaryOp::Mul, g, w, false, view);
  }
  params[i].set_grad(view);
}

void DistributedDataParallel::Reducer::launch(Bucket& b) {
  NoGradGuard no_grad;
  if (shard_world > 0) {
    const int64_t chunk = b.flat.numel() / shard_world;
    b.work = distributed::UncheckedCollectives::reduce_scatter_async(
        *ddp.group_, b.flat.narrow(0, shard_rank * chunk, chunk), b.flat);
  } else if (b.comm.defined()) {
    b.comm.copy_(b.flat);
    b.work = distributed::UncheckedCollectives::all_reduce_async(*ddp.group_, b.comm);
  } else {
    b.work = distributed::UncheckedCollectives::all_reduce_async(*ddp.group_, b.flat);
  }
  b.launched = true;
}

void DistributedDataParallel::Reducer::finish() {
  // The end of backward: every bucket is in flight; wait and widen the compressed ones.
  for (Bucket& b : buckets) {
    const auto t0 = std::chrono::steady_clock::now();
    b.work.wait();
    ddp.wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (b.comm.defined()) {
      NoGradGuard no_grad;
      b.flat.copy_(b.comm);
    }
  }
  active = false;
  if (after_reduce) after_reduce();
  ddp.end_of_backward();
}

void DistributedDataParallel::Reducer::reset() {
  for (Bucket& b : buckets) {
    b.work = distributed::Work();  // of the old group, which failed or was replaced: not waited for
    b.launched = false;
    b.pending = b.params.size();
  }
  ready.assign(params.size(), false);
  next_launch = 0;
  active = false;
}

void DistributedDataParallel::Reducer::shadow_backward() {
  MT_CHECK(shard_world == 0, "DistributedDataParallel.join: a rank that joined would not update its shard of the ",
           "optimizer state (ZeroRedundancyOptimizer); every rank must run every step");
  std::vector<distributed::Work> works;
  std::vector<Tensor> keep;
  for (Bucket& b : buckets) {
    const Tensor& like = b.comm.defined() ? b.comm : b.flat;
    keep.push_back(zeros(like.shape(), like.options()));
    works.push_back(distributed::UncheckedCollectives::all_reduce_async(*ddp.group_, keep.back()));
  }
  for (auto& w : works) w.wait();
}

}  // namespace mixtrain::nn
