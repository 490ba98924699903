// The dry-run prediction, measurement, allocator replay, arena layout and batch search behind
// `mixtrain memory` (memory_predict.h).
#include "memory_predict.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <unordered_map>

#include "common/cli.h"
#include "mixtrain/core/checked_int.h"
#include "mixtrain/memory/plan.h"
#include "mixtrain/distributed/zero.h"

namespace mixtrain::cli {

namespace {

// One optimizer and scaler per task, as examples::train makes them. ZeRO-1: the optimizer over
// rank 0's shard (`shard`: views of the parameters' elements it updates, `pieces` where they lie).
struct Trainer {
  std::unique_ptr<examples::TrainTask> task;
  std::unique_ptr<optim::AdamW> opt;
  std::unique_ptr<amp::GradScaler> scaler;
  std::unique_ptr<amp::Fp8Scaling> fp8;  // --precision fp8
  std::vector<distributed::ZeroPiece> pieces;
  std::vector<Tensor> shard;
};

Trainer make_trainer(TaskSpec spec, examples::Precision p, Device device, bool initialise_weights = true,
                     int zero_world = 0) {
  spec.device = device;
  spec.synthetic = true;
  Trainer t;
  {
    // A meta model's values are never read: skipping the initialisers' CPU draws is most of the
    // full transformer's build time, which each --fit probe pays.
    std::optional<nn::init::SkipInitGuard> skip_init;
    if (!initialise_weights) skip_init.emplace();
    t.task = make_task(spec);
  }
  std::vector<Tensor> params = t.task->model().parameters();
  if (zero_world > 0) {
    t.pieces = distributed::zero_pieces(params, nn::DistributedDataParallelOptions(), 0, zero_world);
    NoGradGuard no_grad;
    for (const auto& piece : t.pieces)
      t.shard.push_back(params[piece.param].detach().view({-1}).narrow(0, piece.offset, piece.numel));
    params = t.shard;
  }
  t.opt = std::make_unique<optim::AdamW>(params, optim::AdamWOptions().lr(default_lr(spec.model)));
  t.scaler = std::make_unique<amp::GradScaler>(
      amp::GradScalerOptions().init_scale(65536.0).enabled(p == examples::Precision::Fp16));
  t.fp8 = examples::make_fp8_scaling(t.task->model(), p, amp::Fp8Recipe());
  return t;
}

// One step as examples::train takes it (train_loop.cpp): autocast forward, scaled backward,
// unscale, clip at 1, scaler step and update. `autocast_type` is the device type whose autocast
// state applies (the target's, also for a meta step). The outcome is read only for a real step
// (a meta one cannot give the found_inf flag).
amp::StepOutcome train_step(Trainer& t, DeviceType autocast_type, examples::Precision p) {
  t.opt->zero_grad();
  if (!t.shard.empty())
    for (Tensor& param : t.task->model().parameters()) param.set_grad(Tensor());
  Tensor loss;
  {
    const examples::ForwardScope scope(autocast_type, p);
    loss = t.task->next_loss();
  }
  t.scaler->scale(loss).backward();
  // ZeRO-1: the shard's gradients are its elements of the (reduced) gradients, read in place.
  const std::vector<Tensor> params = t.task->model().parameters();
  for (size_t i = 0; i < t.shard.size(); ++i)
    t.shard[i].set_grad(params[t.pieces[i].param].grad().view({-1}).narrow(0, t.pieces[i].offset, t.pieces[i].numel));
  t.scaler->unscale_(*t.opt);
  nn::utils::clip_grad_norm_(t.shard.empty() ? params : t.shard, 1.0);
  amp::StepOutcome outcome = t.scaler->step(*t.opt);
  t.scaler->update();
  if (t.fp8) t.fp8->update();
  return outcome;
}

// Live bytes after event e, checked: a step past 2^63 - 1 bytes is an Error, never a negative figure.
int64_t live_after(int64_t live, const memory::MemoryEvent& e, const char* what) {
  const int64_t bytes = checked_int64(e.bytes, what);
  return e.kind == memory::MemoryEvent::Kind::Alloc ? checked_add(live, bytes, what) : checked_sub(live, bytes, what);
}

int64_t peak_live_of_role(const memory::MemoryTrace& trace, memory::Role role) {
  int64_t now = 0, peak = 0;
  for (const memory::MemoryEvent& e : trace.events) {
    if (e.role != role) continue;
    now = live_after(now, e, "mixtrain memory: activation bytes live");
    peak = std::max(peak, now);
  }
  return peak;
}

// Hands out increasing addresses that are never mapped: the CachingAllocator only keeps
// bookkeeping about its blocks and never touches their memory.
class UnmappedBacking : public memory::BackingAllocator {
 public:
  void* alloc(size_t nbytes) override {
    void* p = reinterpret_cast<void*>(next_);
    next_ += (nbytes + 4095) / 4096 * 4096;
    return p;
  }
  void free(void*, size_t) override {}
  size_t free_device_memory() override { return size_t{1} << 50; }
  std::string name() const override { return "unmapped"; }

 private:
  uintptr_t next_ = uintptr_t{1} << 32;
};

// Two meta storages of these sizes, made and dropped one after the other, mark where the
// recorded warm-up step ends and the measured step begins.
constexpr int64_t kMarkerBytes[2] = {3587, 3589};

void mark_step_boundary() {
  for (const int64_t bytes : kMarkerBytes) mixtrain::empty({bytes}, TensorOptions(kBool).device(Device::meta()));
}

// The events after the marker, preceded by before_step Allocs for the buffers alive at it. Roles
// come from the whole recording, so state the first step made keeps the role its lifetime gave it
// (optimizer state); a dry run started at the second step would see it only as alive before.
memory::MemoryTrace second_step(const memory::MemoryTrace& both) {
  const auto& ev = both.events;
  size_t mark = ev.size();
  for (size_t i = 0; i + 3 < ev.size() && mark == ev.size(); ++i)
    if (ev[i].requested == size_t(kMarkerBytes[0]) && ev[i + 2].requested == size_t(kMarkerBytes[1]) &&
        ev[i].kind == memory::MemoryEvent::Kind::Alloc && ev[i + 1].kind == memory::MemoryEvent::Kind::Free &&
        ev[i + 2].kind == memory::MemoryEvent::Kind::Alloc && ev[i + 3].kind == memory::MemoryEvent::Kind::Free)
      mark = i;
  MT_CHECK(mark < ev.size(), "mixtrain memory: the step boundary marker is missing from the dry run's trace");
  std::unordered_map<int64_t, size_t> alive;  // buffer -> its Alloc event
  std::vector<int64_t> order;
  for (size_t i = 0; i < mark; ++i) {
    if (ev[i].kind == memory::MemoryEvent::Kind::Alloc) {
      alive[ev[i].buffer] = i;
      order.push_back(ev[i].buffer);
    } else {
      alive.erase(ev[i].buffer);
    }
  }
  memory::MemoryTrace out;
  out.target = both.target;
  out.assumptions = both.assumptions;
  for (const int64_t id : order) {
    const auto it = alive.find(id);
    if (it == alive.end()) continue;
    memory::MemoryEvent e = ev[it->second];
    e.before_step = true;
    out.events.push_back(e);
  }
  out.events.insert(out.events.end(), ev.begin() + static_cast<std::ptrdiff_t>(mark + 4), ev.end());
  return out;
}

}  // namespace

StepPrediction predict_step(const StepQuery& query) {
  TaskSpec spec = query.spec;
  const int64_t rows = spec.batch_size;
  const bool shard = query.global_batch_size > 0 && rows < query.global_batch_size;
  if (query.global_batch_size > 0) {
    MT_CHECK(rows >= 1 && rows <= query.global_batch_size, "predict_step: a rank's batch of ", rows,
             " samples must lie in [1, ", query.global_batch_size, "], the global batch");
    spec.batch_size = query.global_batch_size;
  }
  MT_CHECK(query.zero_stage == 0 || (query.zero_stage == 1 && query.world_size >= 1), "predict_step: ZeRO stage ",
           query.zero_stage, " over ", query.world_size, " ranks is not predicted (0, or 1 over one or more ranks)");
  Trainer t = make_trainer(spec, query.precision, Device::meta(), query.initialise_weights,
                           query.zero_stage == 1 ? query.world_size : 0);
  // Rank 0 of two whose shares are `rows` and the rest: its step computes on its rows only.
  if (shard) t.task->set_data_shard(0, {static_cast<double>(rows), static_cast<double>(query.global_batch_size - rows)});
  const auto start = std::chrono::steady_clock::now();
  const memory::MemoryTrace both = memory::dry_run(query.target, [&] {
    train_step(t, query.target.type, query.precision);
    mark_step_boundary();
    train_step(t, query.target.type, query.precision);
  });
  StepPrediction r;
  r.trace = second_step(both);
  r.dry_run_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  r.batch_size = query.global_batch_size > 0 ? rows : t.task->batch_size();
  r.peak_bytes = r.trace.peak_bytes();
  r.reserved_bytes = predicted_reserved_bytes(r.trace);
  for (const memory::MemoryEvent& e : r.trace.events)
    r.persistent_bytes = live_after(r.persistent_bytes, e, "mixtrain memory: persistent bytes");
  r.activation_bytes = peak_live_of_role(r.trace, memory::Role::Activation);
  r.lower_bound_bytes = r.trace.in_step_peak_bytes();
  return r;
}

int64_t predicted_reserved_bytes(const memory::MemoryTrace& trace) {
  UnmappedBacking backing;
  memory::CachingAllocator allocator(backing, trace.target);
  std::unordered_map<int64_t, void*> live;
  for (const memory::MemoryEvent& e : trace.events) {
    if (e.kind == memory::MemoryEvent::Kind::Alloc) {
      live[e.buffer] = allocator.allocate(e.requested);
    } else if (auto it = live.find(e.buffer); it != live.end()) {
      allocator.deallocate(it->second);
      live.erase(it);
    }
  }
  const int64_t peak = allocator.stats().peak_reserved_bytes;
  for (const auto& [id, ptr] : live) allocator.deallocate(ptr);
  return peak;
}

StepMeasurement measure_step(const StepQuery& query) {
  const Device device = query.spec.device;
  memory::empty_cache(device);  // reserved bytes from here on are this measurement's own
  const memory::Stats before = memory::stats(device);
  StepMeasurement m;
  {
    Trainer t = make_trainer(query.spec, query.precision, device);
    train_step(t, device.type, query.precision);
    memory::reset_peak_stats(device);
    m.skipped = !train_step(t, device.type, query.precision).taken();
    const memory::Stats after = memory::stats(device);
    m.peak_bytes = after.peak_allocated_bytes - before.allocated_bytes;
    m.peak_reserved_bytes = after.peak_reserved_bytes - before.reserved_bytes;
  }
  memory::empty_cache(device);
  return m;
}

ArenaLayout arena_layout(const std::vector<memory::BufferLifetime>& buffers) {
  const memory::ArenaPlan plan = memory::plan_arena(buffers);
  ArenaLayout layout;
  layout.offsets.assign(plan.offsets.begin(), plan.offsets.end());
  layout.bytes = static_cast<int64_t>(plan.arena_bytes);
  return layout;
}

int64_t arena_bytes(const std::vector<memory::BufferLifetime>& buffers) {
  return static_cast<int64_t>(memory::plan_arena(buffers).arena_bytes);
}

int64_t parse_byte_size(const std::string& text, const std::string& flag) {
  const auto bad = [&](const std::string& why) {
    return examples::cli::UsageError(flag + ": expects a size such as 8GiB, 512MiB or 4096 (bytes), got '" + text +
                                     "'" + why);
  };
  size_t digits = 0;
  while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.'))
    ++digits;
  const std::string number = text.substr(0, digits), unit = text.substr(digits);
  if (number.empty() || number.front() == '.' || number.back() == '.' || std::count(number.begin(), number.end(), '.') > 1)
    throw bad("");
  static const std::vector<std::pair<std::string, double>> kUnits = {
      {"", 1},         {"B", 1},          {"KiB", 0x1p10},   {"MiB", 0x1p20},   {"GiB", 0x1p30},
      {"TiB", 0x1p40}, {"kB", 1e3},       {"KB", 1e3},       {"MB", 1e6},       {"GB", 1e9},
      {"TB", 1e12}};
  const auto unit_it = std::find_if(kUnits.begin(), kUnits.end(), [&](const auto& u) { return u.first == unit; });
  if (unit_it == kUnits.end()) throw bad(" (units: B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)");
  const double bytes = std::strtod(number.c_str(), nullptr) * unit_it->second;
  if (!(bytes >= 1) || bytes > 0x1p62) throw bad(" (must be 1 byte to 4 EiB)");
  if (unit_it->second == 1 && number.find('.') != std::string::npos) throw bad(" (bytes are whole)");
  return static_cast<int64_t>(std::llround(bytes));
}

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (std::fabs(v) >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

// The smallest batch searched: the tiny MLP preset's synthetic data needs two samples.
constexpr int64_t kMinFitBatch = 2;

std::string FitResult::binds() const {
  if (over_batch == 0) return "";
  return over_peak_bytes > limit ? "allocated" : "reserved";
}

FitResult fit_batch(StepQuery query, int64_t limit, int64_t max_batch, FitBy by) {
  FitResult r;
  r.by = by;
  r.limit = limit;
  // The figure the search keeps within the limit (reserved is never below allocated, but the
  // larger of the two is taken so the answer holds whatever the replay says).
  const auto bytes = [by](const StepPrediction& p) {
    return by == FitBy::Allocated ? p.peak_bytes : std::max(p.peak_bytes, p.reserved_bytes);
  };
  const auto at = [&](int64_t batch) {
    query.spec.batch_size = batch;
    ++r.dry_runs;
    return predict_step(query);
  };
  const auto mark_over = [&](int64_t batch, const StepPrediction& p) {
    r.over_batch = batch;
    r.over_peak_bytes = p.peak_bytes;
    r.over_reserved_bytes = p.reserved_bytes;
  };
  r.best = at(kMinFitBatch);
  const int64_t peak_at_min = r.best.peak_bytes;
  if (bytes(r.best) > limit) {
    mark_over(kMinFitBatch, r.best);
    return r;
  }
  r.fits = true;
  int64_t lo = kMinFitBatch, hi = 0;  // lo fits; hi (when > 0) does not
  int64_t over_bytes = 0;             // bytes(hi)
  const auto probe = [&](int64_t batch) {
    StepPrediction p = at(batch);
    const bool fits = bytes(p) <= limit;
    if (fits && batch > lo) {
      lo = batch;
      r.best = std::move(p);
    } else if (!fits && (hi == 0 || batch < hi)) {
      hi = batch;
      over_bytes = bytes(p);
      mark_over(batch, p);
    }
    return fits;
  };
  // Each probe builds the task anew (on meta, weights left uninitialised) and dry-runs two steps
  // (tens of ms for the full transformer), so guess first: the peak grows about linearly with the
  // batch. The guess and its neighbour usually settle it; doubling and bisection below make the answer exact whatever the guess.
  if (max_batch >= 2 * kMinFitBatch && probe(2 * kMinFitBatch)) {
    // The slope of the allocated peak: smooth, where the reserved bytes rise in segment-sized steps
    // (flat from 2 to 4 for a small model, which would leave doubling to find the answer).
    const int64_t slope = (r.best.peak_bytes - peak_at_min) / kMinFitBatch;
    if (slope > 0) {
      const int64_t guess = std::clamp<int64_t>(lo + (limit - bytes(r.best)) / slope, lo, max_batch);
      if (guess > lo) {
        if (probe(guess)) {
          if (guess < max_batch) probe(guess + 1);
        } else if (guess - 1 > lo) {
          probe(guess - 1);
        }
      }
    }
  }
  while (hi == 0 && lo < max_batch) probe(lo > max_batch / 2 ? max_batch : lo * 2);
  // Interpolate between the peaks at lo and hi (near-linear, so a probe or two), bisecting after
  // any probe that did not halve the interval, so it stays O(log) whatever the curve.
  bool bisect = false;
  while (hi > lo + 1) {
    const int64_t width = hi - lo;
    int64_t mid = lo + width / 2;
    if (!bisect && over_bytes > bytes(r.best)) {
      const double t = static_cast<double>(limit - bytes(r.best)) / static_cast<double>(over_bytes - bytes(r.best));
      mid = std::clamp<int64_t>(lo + static_cast<int64_t>(t * static_cast<double>(width)), lo + 1, hi - 1);
    }
    probe(mid);
    bisect = !bisect && 2 * (hi - lo) > width;
  }
  r.capped = hi == 0;
  return r;
}

}  // namespace mixtrain::cli
