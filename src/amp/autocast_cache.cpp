// The weight-cast cache (docs/AUTOCAST.md, "Weight-cast cache"): the low-precision cast of an
// fp32 parameter is made once per outermost autocast scope and shared, as one autograd node, by
// every use in the scope, so its gradient reaches the fp32 leaf once, summed over the uses.
//
// One process-global map under a mutex, as PyTorch (a thread-local map leaked entries written by
// backward threads, pytorch #86136). Differences from PyTorch, and why:
//  - the key holds the target dtype, so an inner bf16 scope never gets an outer scope's fp16 cast;
//  - the key holds the creating thread, and a thread's outermost exit drops only its own entries:
//    another thread's scope is neither robbed of its casts nor handed a cast made before an
//    optimizer step it has since seen.
#include <algorithm>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "amp/autocast_internal.h"
#include "mixtrain/autograd/node.h"
#include "mixtrain/base/grad_mode.h"

namespace mixtrain::amp {

namespace detail {

namespace {

struct Key {
  const TensorImpl* source;
  DType dtype;
  std::thread::id thread;
  bool operator==(const Key& o) const { return source == o.source && dtype == o.dtype && thread == o.thread; }
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    size_t h = std::hash<const void*>()(k.source);
    h ^= std::hash<std::thread::id>()(k.thread) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h ^ static_cast<size_t>(k.dtype);
  }
};

struct Entry {
  // Tells a live source from a dead one whose address a new tensor reuses: the weak pointer
  // expires, or belongs to another control block, and the lookup is a miss.
  std::weak_ptr<TensorImpl> source;
  Tensor cast;
  uint64_t version = 0;  // the source's when cast: an in-place update since (an optimizer step) is a miss
  uint64_t order = 0;    // when it was cached: the scope's exit drops casts in this order
};
uint64_t g_next_order = 0;  // under g_mutex

std::mutex g_mutex;
std::unordered_map<Key, Entry, KeyHash>& cache() {
  static auto* map = new std::unordered_map<Key, Entry, KeyHash>();  // never destroyed: used from thread exits
  return *map;
}

bool same_object(const std::weak_ptr<TensorImpl>& w, const std::shared_ptr<TensorImpl>& s) {
  return !w.expired() && !w.owner_before(s) && !s.owner_before(w);
}

// Backward of a cached cast: the gradient back in the weight's dtype. It saves no tensors, so,
// unlike a FunctionNode, it may run in several backward passes: the cached cast is shared by
// every use in the scope, and each use may be backpropagated on its own (two losses, gradient
// accumulation over micro-batches inside one scope).
class CachedCastBackward final : public autograd::Node {
 public:
  explicit CachedCastBackward(DType source_dtype) : source_dtype_(source_dtype) {}
  autograd::TensorList apply(autograd::TensorList&& grads) override {
    const Tensor& g = grads.at(0);
    return {g.defined() && g.dtype() != source_dtype_ ? g.to(source_dtype_) : g};
  }
  const char* name() const override { return "ToBackward0"; }

 private:
  DType source_dtype_;
};

// The edge into the leaf's gradient accumulator, shared with the rest of the graph.
autograd::Edge leaf_edge(const Tensor& leaf) {
  const std::shared_ptr<TensorImpl>& impl = leaf.impl();
  std::shared_ptr<autograd::Node> acc = impl->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<autograd::AccumulateGrad>(impl);
    acc->input_meta.push_back({impl->shape, impl->dtype, impl->device});
    impl->grad_accumulator = acc;
  }
  return {acc, 0};
}

// The cast with its backward attached whatever the grad mode: a cast made under NoGradGuard and
// reused later by a grad-enabled use must still carry the gradient to the weight (pytorch
// #158232, fixed the same way by PR #165068).
Tensor make_cast(const Tensor& weight, DType dtype) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = weight.to(dtype);
  }
  auto node = std::make_shared<CachedCastBackward>(weight.dtype());
  node->next_edges.push_back(leaf_edge(weight));
  node->input_meta.push_back({weight.shape(), weight.dtype(), weight.device()});
  out.impl()->requires_grad = true;
  out.impl()->grad_fn = std::move(node);
  out.impl()->output_nr = 0;
  return out;
}

}  // namespace

Tensor cached_cast(const Tensor& weight, DType dtype) {
  const Key key{weight.impl().get(), dtype, std::this_thread::get_id()};
  Counters& c = counters();
  Entry stale;  // destroyed after the lock is released
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = cache().find(key);
    if (it != cache().end()) {
      if (same_object(it->second.source, weight.impl()) && it->second.version == weight.version()) {
        c.cache_hits.fetch_add(1, std::memory_order_relaxed);
        return it->second.cast;
      }
      stale = std::move(it->second);
      cache().erase(it);
    }
  }
  // Only this thread writes entries with this key, so casting outside the lock races with no one.
  const uint64_t version = weight.version();
  Tensor out = make_cast(weight, dtype);
  c.cache_misses.fetch_add(1, std::memory_order_relaxed);
  count_cast(out);
  std::lock_guard<std::mutex> lock(g_mutex);
  cache()[key] = Entry{weight.impl(), out, version, g_next_order++};
  return out;
}

void clear_thread_cache() {
  const std::thread::id me = std::this_thread::get_id();
  std::vector<Entry> dropped;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    for (auto it = cache().begin(); it != cache().end();) {
      if (it->first.thread == me) {
        dropped.push_back(std::move(it->second));
        it = cache().erase(it);
      } else {
        ++it;
      }
    }
  }
  // Released after the lock, in the order they were cached, not the map's: its order changes as
  // it rehashes, and a static memory plan (memory/step_plan.h) needs every step to free alike.
  std::sort(dropped.begin(), dropped.end(), [](const Entry& a, const Entry& b) { return a.order < b.order; });
  for (Entry& e : dropped) e.cast = Tensor();
}

}  // namespace detail

void clear_autocast_cache() {
  std::unordered_map<detail::Key, detail::Entry, detail::KeyHash> dropped;
  std::lock_guard<std::mutex> lock(detail::g_mutex);
  dropped.swap(detail::cache());
}

size_t autocast_cache_size() {
  std::lock_guard<std::mutex> lock(detail::g_mutex);
  return detail::cache().size();
}

}  // namespace mixtrain::amp
