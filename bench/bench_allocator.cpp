// Allocation throughput of the CachingAllocator against the raw allocator it sits on, on the
// allocation trace of one mixed-precision MLP training step (batch 512, 215-1000-500-1), and the
// fragmentation it leaves (peak reserved / peak allocated): over the system allocator on the CPU,
// and over cudaMalloc where a GPU is present (the *_Cuda benchmarks; skipped, saying why,
// elsewhere). Memory is never touched, so this measures the allocators alone.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "memory/backing.h"
#include "mixtrain/base/device.h"
#include "mixtrain/memory/caching_allocator.h"

namespace mm = mixtrain::memory;

namespace {

// One allocation event stream; id indexes a slot holding the live pointer.
struct Event {
  bool alloc;
  int id;
  size_t bytes;
};

class Trace {
 public:
  int alloc(size_t bytes) {
    events_.push_back({true, next_id_, bytes});
    return next_id_++;
  }
  void free(int id) { events_.push_back({false, id, 0}); }
  const std::vector<Event>& events() const { return events_; }
  int slots() const { return next_id_; }
  int64_t allocations() const {
    int64_t n = 0;
    for (const Event& e : events_) n += e.alloc;
    return n;
  }

 private:
  std::vector<Event> events_;
  int next_id_ = 0;
};

constexpr size_t kF32 = 4, kF16 = 2;

// Persistent state (fp32 weights, Adam moments) lives outside the step and is allocated once.
void persistent_state(Trace& t, const std::vector<size_t>& dims) {
  for (size_t i = 0; i + 1 < dims.size(); ++i)
    for (int copy = 0; copy < 3; ++copy) {  // weight, exp_avg, exp_avg_sq
      t.alloc(dims[i] * dims[i + 1] * kF32);
      t.alloc(dims[i + 1] * kF32);
    }
}

// One step the way autograd + autocast + AdamW + GradScaler would allocate: fp16 weight casts
// and activations forward, saved tensors freed in reverse during backward while gradients are
// allocated, fp32 gradients kept until zero_grad(set_to_none).
void training_step(Trace& t, size_t batch, const std::vector<size_t>& dims) {
  const size_t layers = dims.size() - 1;
  const int x = t.alloc(batch * dims[0] * kF32);
  const int y = t.alloc(batch * kF32);
  const int x16 = t.alloc(batch * dims[0] * kF16);
  std::vector<int> w16(layers), b16(layers), h(layers), act(layers, -1);
  for (size_t i = 0; i < layers; ++i) {
    w16[i] = t.alloc(dims[i] * dims[i + 1] * kF16);  // autocast weight cache
    b16[i] = t.alloc(dims[i + 1] * kF16);
    h[i] = t.alloc(batch * dims[i + 1] * kF16);
    if (i + 1 < layers) act[i] = t.alloc(batch * dims[i + 1] * kF16);  // relu
  }
  const int out32 = t.alloc(batch * kF32);  // mse_loss runs in fp32
  const int diff = t.alloc(batch * kF32);
  const int sq = t.alloc(batch * kF32);
  const int loss = t.alloc(kF32);
  const int scaled = t.alloc(kF32);

  const int g_loss = t.alloc(kF32);
  t.free(scaled);
  const int g_sq = t.alloc(batch * kF32);
  t.free(g_loss);
  t.free(loss);
  t.free(sq);
  const int g_diff = t.alloc(batch * kF32);
  t.free(g_sq);
  t.free(diff);
  int g = t.alloc(batch * kF16);  // grad of the fp16 output
  t.free(g_diff);
  t.free(out32);
  std::vector<int> gw(layers), gb(layers);
  for (size_t i = layers; i-- > 0;) {
    if (act[i] >= 0) {  // relu backward
      const int gh = t.alloc(batch * dims[i + 1] * kF16);
      t.free(g);
      t.free(act[i]);
      g = gh;
    }
    const int gw16 = t.alloc(dims[i] * dims[i + 1] * kF16);
    const int gb16 = t.alloc(dims[i + 1] * kF16);
    gw[i] = t.alloc(dims[i] * dims[i + 1] * kF32);  // accumulated into the fp32 master grad
    gb[i] = t.alloc(dims[i + 1] * kF32);
    t.free(gw16);
    t.free(gb16);
    const int g_in = t.alloc(batch * dims[i] * kF16);
    t.free(g);
    t.free(h[i]);
    g = g_in;
  }
  t.free(g);
  for (size_t i = 0; i < layers; ++i) {
    t.free(w16[i]);
    t.free(b16[i]);
  }
  t.free(x16);
  t.free(x);
  t.free(y);
  const int found_inf = t.alloc(kF32);  // GradScaler: fused unscale + non-finite check
  for (size_t i = 0; i < layers; ++i) {  // AdamW: one fp32 temporary per parameter
    const int tw = t.alloc(dims[i] * dims[i + 1] * kF32);
    t.free(tw);
    const int tb = t.alloc(dims[i + 1] * kF32);
    t.free(tb);
  }
  t.free(found_inf);
  for (size_t i = 0; i < layers; ++i) {  // zero_grad(set_to_none=true)
    t.free(gw[i]);
    t.free(gb[i]);
  }
}

const std::vector<size_t> kDims = {215, 1000, 500, 1};
constexpr size_t kBatch = 512;

template <class Alloc, class Free>
void replay(const Trace& t, std::vector<void*>& slots, Alloc alloc, Free free) {
  for (const Event& e : t.events()) {
    if (e.alloc) {
      slots[e.id] = alloc(e.bytes);
    } else {
      free(slots[e.id], e.id);
    }
  }
}

void run_mlp(benchmark::State& state, bool caching, mm::Strategy strategy,
             mixtrain::Device device = mixtrain::Device::cpu()) {
  if (device.is_cuda() && !mixtrain::cuda::is_available()) {
    state.SkipWithError("no CUDA device on this machine");
    return;
  }
  Trace persistent, step;
  persistent_state(persistent, kDims);
  training_step(step, kBatch, kDims);
  std::vector<size_t> step_sizes(step.slots());
  for (const Event& e : step.events())
    if (e.alloc) step_sizes[e.id] = e.bytes;

  const std::unique_ptr<mm::BackingAllocator> backing = mm::make_backing(device);
  mm::BackingAllocator& system = *backing;
  // PreAllocate would reserve most of the RAM's address space (or the GPU); 2% keeps it modest.
  mm::CachingAllocator cache(system, device, mm::CachingAllocatorOptions().strategy(strategy).memory_fraction(0.02));
  std::vector<void*> keep(persistent.slots()), slots(step.slots());
  auto a_cache = [&](size_t n) { return cache.allocate(n); };
  auto f_cache = [&](void* p, int) { cache.deallocate(p); };
  auto a_sys = [&](size_t n) { return system.alloc(n); };
  auto f_sys = [&](void* p, int id) { system.free(p, step_sizes[id]); };

  if (caching) {
    replay(persistent, keep, a_cache, f_cache);
    replay(step, slots, a_cache, f_cache);  // warm-up: the first step fills the cache
    cache.reset_peak_stats();
    for (auto _ : state) replay(step, slots, a_cache, f_cache);
    const mm::Stats s = cache.stats();
    state.counters["fragmentation"] =
        static_cast<double>(s.peak_reserved_bytes) / static_cast<double>(s.peak_allocated_bytes);
    state.counters["reserved_MiB"] = static_cast<double>(s.peak_reserved_bytes) / (1 << 20);
    state.counters["allocated_MiB"] = static_cast<double>(s.peak_allocated_bytes) / (1 << 20);
    for (void* p : keep) cache.deallocate(p);
  } else {
    replay(persistent, keep, a_sys, f_sys);
    for (auto _ : state) replay(step, slots, a_sys, f_sys);
    for (void* p : keep) system.free(p, 0);
  }
  state.SetItemsProcessed(state.iterations() * step.allocations());
  state.counters["allocs_per_step"] = static_cast<double>(step.allocations());
}

void BM_MlpStep_System(benchmark::State& state) { run_mlp(state, false, mm::Strategy::None); }
void BM_MlpStep_CachingAutoGrowth(benchmark::State& state) { run_mlp(state, true, mm::Strategy::AutoGrowth); }
void BM_MlpStep_CachingPreAllocate(benchmark::State& state) { run_mlp(state, true, mm::Strategy::PreAllocate); }
void BM_MlpStep_CachingNone(benchmark::State& state) { run_mlp(state, true, mm::Strategy::None); }
void BM_MlpStep_Cuda_Raw(benchmark::State& state) {
  run_mlp(state, false, mm::Strategy::None, mixtrain::Device::cuda());
}
void BM_MlpStep_Cuda_CachingAutoGrowth(benchmark::State& state) {
  run_mlp(state, true, mm::Strategy::AutoGrowth, mixtrain::Device::cuda());
}
void BM_MlpStep_Cuda_CachingPreAllocate(benchmark::State& state) {
  run_mlp(state, true, mm::Strategy::PreAllocate, mixtrain::Device::cuda());
}

// The steady state of one size: allocate and free the same block again and again.
void BM_AllocFree_Caching(benchmark::State& state) {
  mm::SystemBackingAllocator system;
  mm::CachingAllocator cache(system, mixtrain::Device::cpu());
  const auto n = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void* p = cache.allocate(n);
    benchmark::DoNotOptimize(p);
    cache.deallocate(p);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_AllocFree_System(benchmark::State& state) {
  mm::SystemBackingAllocator system;
  const auto n = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void* p = system.alloc(n);
    benchmark::DoNotOptimize(p);
    system.free(p, n);
  }
  state.SetItemsProcessed(state.iterations());
}

}  // namespace

BENCHMARK(BM_MlpStep_System);
BENCHMARK(BM_MlpStep_CachingAutoGrowth);
BENCHMARK(BM_MlpStep_CachingPreAllocate);
BENCHMARK(BM_MlpStep_CachingNone);
BENCHMARK(BM_MlpStep_Cuda_Raw)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MlpStep_Cuda_CachingAutoGrowth)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MlpStep_Cuda_CachingPreAllocate)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AllocFree_Caching)->Arg(256)->Arg(64 << 10)->Arg(4 << 20);
BENCHMARK(BM_AllocFree_System)->Arg(256)->Arg(64 << 10)->Arg(4 << 20);

BENCHMARK_MAIN();
