// The dry-run recorder: the per-thread op and phase labels, the list of live meta storages (so a
// dry run starts from what already exists), and the recorder that turns storage births and
// deaths into a MemoryTrace.
#include "mixtrain/memory/dry_run.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "mixtrain/base/error.h"
#include "mixtrain/memory/caching_allocator.h"

namespace mixtrain::memory {

namespace detail {
std::atomic<bool> g_recording{false};
}

namespace {

thread_local Phase t_phase = Phase::Forward;
thread_local const char* t_op = nullptr;

// The allocator's rounding of a storage or workspace of nbytes must fit an int64, which every
// trace sum counts in; checked before the storage is registered anywhere.
void check_traceable(size_t nbytes, const char* who) {
  constexpr uint64_t kLargest = static_cast<uint64_t>(INT64_MAX) - CachingAllocator::kMinBlockSize + 1;
  MT_CHECK(nbytes <= kLargest, who, ": ", nbytes, " bytes round up (to the allocator's ", CachingAllocator::kMinBlockSize,
           "-byte blocks) past 2^63 - 1, the most a memory trace counts");
}

struct MetaEntry {
  size_t nbytes = 0;
  uint64_t seq = 0;  // creation order, so a dry run lists existing storages as they were made
  bool tagged = false;
  Role role = Role::Input;
};

// Live meta storages. Never destroyed: storages in static objects die after main returns.
struct MetaRegistry {
  std::mutex mutex;
  std::unordered_map<const void*, MetaEntry> live;
  uint64_t next_seq = 0;
  int64_t live_bytes = 0;  // rounded as the allocator would: what a real device would hold
};

int64_t rounded_bytes(size_t nbytes) {
  const uint64_t block = CachingAllocator::kMinBlockSize;
  return static_cast<int64_t>((static_cast<uint64_t>(nbytes) + block - 1) / block * block);
}
MetaRegistry& meta_registry() {
  static MetaRegistry* r = new MetaRegistry();
  return *r;
}

struct Buffer {
  size_t bytes = 0;
  bool tagged = false;
  Role role = Role::Temporary;
  Phase alloc_phase = Phase::Forward;
  bool freed = false;
  Phase free_phase = Phase::Forward;
};

class Recorder {
 public:
  Recorder(Device target, Device recorded) : recorded_(recorded) { trace_.target = target; }
  Device target() const { return trace_.target; }
  bool records(Device device) const { return device == recorded_; }

  // Storages alive at the start: Allocs at the head of the trace, marked before_step.
  void add_existing(const std::vector<std::pair<const void*, MetaEntry>>& existing) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [key, entry] : existing) {
      const int64_t id = new_buffer(entry.nbytes, entry.tagged ? entry.role : Role::Input, true);
      live_[key] = id;
      trace_.events.back().before_step = true;
    }
  }

  void alloc(const void* key, size_t nbytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    live_[key] = new_buffer(nbytes, Role::Temporary, false);
  }

  void free(const void* key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(key);
    if (it == live_.end()) return;  // born outside the recording on another device
    const int64_t id = it->second;
    live_.erase(it);
    free_buffer(id);
  }

  void tag(const void* key, Role role) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(key);
    if (it == live_.end()) return;
    Buffer& b = buffers_[static_cast<size_t>(it->second)];
    b.tagged = true;
    b.role = role;
  }

  // held: once per key per dry run, never freed (the cuBLAS workspace lives as long as the process).
  int64_t workspace(const char* key, size_t bytes, bool held) {
    check_traceable(bytes, "memory::dry_run: a workspace");
    std::lock_guard<std::mutex> lock(mutex_);
    if (held && !held_keys_.insert(key).second) return -1;
    return new_buffer(bytes, Role::Workspace, true);
  }

  void end_workspace(int64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (id >= 0 && id < static_cast<int64_t>(buffers_.size()) && !buffers_[static_cast<size_t>(id)].freed) free_buffer(id);
  }

  void mark_step() {
    std::lock_guard<std::mutex> lock(mutex_);
    trace_.step_starts.push_back(trace_.events.size());
  }

  void assume(const char* what) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (std::find(trace_.assumptions.begin(), trace_.assumptions.end(), what) == trace_.assumptions.end())
      trace_.assumptions.emplace_back(what);
  }

  // Roles the scopes could not tell at allocation time are settled by lifetime: a forward buffer
  // that outlives forward is an activation, an optimizer buffer that outlives the step is state.
  MemoryTrace finish() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Buffer& b : buffers_) {
      if (b.tagged) continue;
      switch (b.alloc_phase) {
        case Phase::Forward:
          b.role = b.freed && b.free_phase == Phase::Forward ? Role::Temporary : Role::Activation;
          break;
        case Phase::Backward: b.role = Role::Temporary; break;
        case Phase::Optimizer: b.role = b.freed ? Role::Temporary : Role::OptimizerState; break;
      }
    }
    for (MemoryEvent& e : trace_.events) e.role = buffers_[static_cast<size_t>(e.buffer)].role;
    return std::move(trace_);
  }

 private:
  int64_t new_buffer(size_t nbytes, Role role, bool tagged) {
    const auto id = static_cast<int64_t>(buffers_.size());
    Buffer b;
    b.bytes = CachingAllocator::round_size(nbytes);
    b.tagged = tagged;
    b.role = role;
    b.alloc_phase = t_phase;
    buffers_.push_back(b);
    MemoryEvent e;
    e.kind = MemoryEvent::Kind::Alloc;
    e.buffer = id;
    e.bytes = b.bytes;
    e.requested = nbytes;
    e.role = role;
    e.phase = t_phase;
    e.op = t_op ? t_op : "";
    trace_.events.push_back(e);
    return id;
  }

  void free_buffer(int64_t id) {
    Buffer& b = buffers_[static_cast<size_t>(id)];
    b.freed = true;
    b.free_phase = t_phase;
    MemoryEvent e;
    e.kind = MemoryEvent::Kind::Free;
    e.buffer = id;
    e.bytes = b.bytes;
    e.role = b.role;
    e.phase = t_phase;
    e.op = t_op ? t_op : "";
    trace_.events.push_back(e);
  }

  Device recorded_;  // whose storages become events: meta in a dry run, the device in record_step
  std::mutex mutex_;
  MemoryTrace trace_;
  std::vector<Buffer> buffers_;
  std::unordered_map<const void*, int64_t> live_;
  std::unordered_set<std::string> held_keys_;
};

std::atomic<Recorder*> g_recorder{nullptr};

}  // namespace

PhaseScope::PhaseScope(Phase phase) : prev_(t_phase) { t_phase = phase; }
PhaseScope::~PhaseScope() { t_phase = prev_; }
Phase current_phase() { return t_phase; }

OpLabelScope::OpLabelScope(const char* name, bool override_outer)
    : prev_(detail::push_op_label(name, override_outer)) {}
OpLabelScope::~OpLabelScope() { detail::pop_op_label(prev_); }
const char* current_op() { return t_op ? t_op : ""; }

void tag_role_slow(const void* storage, Role role) {
  {
    MetaRegistry& r = meta_registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    if (auto it = r.live.find(storage); it != r.live.end()) {
      it->second.tagged = true;
      it->second.role = role;
    }
  }
  if (Recorder* rec = g_recorder.load(std::memory_order_acquire)) rec->tag(storage, role);
}

void mark_step() {
  if (Recorder* rec = g_recorder.load(std::memory_order_acquire)) rec->mark_step();
}

void note_assumption(const char* what) {
  if (Recorder* rec = g_recorder.load(std::memory_order_acquire)) rec->assume(what);
}

Device dry_run_target() {
  Recorder* rec = g_recorder.load(std::memory_order_acquire);
  return rec ? rec->target() : Device::cpu();
}

DeviceType meta_autocast_device_type() {
  return recording() ? dry_run_target().type : DeviceType::Meta;
}

int64_t begin_workspace(size_t bytes) {
  Recorder* rec = g_recorder.load(std::memory_order_acquire);
  return rec ? rec->workspace("", bytes, false) : -1;
}

void hold_workspace(const char* key, size_t bytes) {
  if (Recorder* rec = g_recorder.load(std::memory_order_acquire)) rec->workspace(key, bytes, true);
}

void end_workspace(int64_t id) {
  if (Recorder* rec = g_recorder.load(std::memory_order_acquire)) rec->end_workspace(id);
}

namespace detail {

const char* push_op_label(const char* name, bool override_outer) {
  const char* prev = t_op;
  if (override_outer || !t_op) t_op = name;
  return prev;
}
void pop_op_label(const char* previous) { t_op = previous; }

void on_storage_created(const void* storage, size_t nbytes, Device device) {
  check_traceable(nbytes, device.is_meta() ? "a meta tensor's storage" : "memory::record_step: a storage");
  if (!device.is_meta()) {
    if (Recorder* rec = g_recorder.load(std::memory_order_acquire); rec && rec->records(device)) rec->alloc(storage, nbytes);
    return;
  }
  {
    MetaRegistry& r = meta_registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    // As a real allocation is refused past the device's memory, a meta one is past what the
    // byte counts can hold: every meta storage alive together is counted in int64.
    int64_t total = 0;
    if (__builtin_add_overflow(r.live_bytes, rounded_bytes(nbytes), &total))
      MT_ERROR("a meta tensor's storage of ", nbytes, " bytes: with the ", r.live.size(), " meta storages alive (",
               r.live_bytes, " bytes) it would take the meta device past 2^63 - 1 bytes, the most mixtrain counts; ",
               "refusing it (as an allocation past a device's memory is refused)");
    r.live_bytes = total;
    MetaEntry e;
    e.nbytes = nbytes;
    e.seq = r.next_seq++;
    r.live[storage] = e;
  }
  if (Recorder* rec = g_recorder.load(std::memory_order_acquire); rec && rec->records(device)) rec->alloc(storage, nbytes);
}

void on_storage_destroyed(const void* storage, Device device) {
  if (!device.is_meta()) {
    if (Recorder* rec = g_recorder.load(std::memory_order_acquire); rec && rec->records(device)) rec->free(storage);
    return;
  }
  {
    MetaRegistry& r = meta_registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    if (auto it = r.live.find(storage); it != r.live.end()) {
      r.live_bytes -= rounded_bytes(it->second.nbytes);
      r.live.erase(it);
    }
  }
  if (Recorder* rec = g_recorder.load(std::memory_order_acquire); rec && rec->records(device)) rec->free(storage);
}

}  // namespace detail

namespace {
MemoryTrace record(Device target, Device recorded, const std::function<void()>& fn, const char* who) {
  MT_CHECK(target.is_cpu() || target.is_cuda(), who, ": the target must be a cpu or cuda device, got ", target);
  MT_CHECK(static_cast<bool>(fn), who, ": no step function given");
  auto recorder = std::make_unique<Recorder>(target, recorded);
  std::vector<std::pair<const void*, MetaEntry>> existing;
  {
    MetaRegistry& r = meta_registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    Recorder* expected = nullptr;
    MT_CHECK(g_recorder.compare_exchange_strong(expected, recorder.get()), who,
             ": another dry run or recording is running; they do not nest");
    if (recorded.is_meta()) existing.assign(r.live.begin(), r.live.end());
  }
  std::sort(existing.begin(), existing.end(), [](const auto& a, const auto& b) { return a.second.seq < b.second.seq; });
  recorder->add_existing(existing);
  detail::g_recording.store(true, std::memory_order_relaxed);
  struct Stop {
    ~Stop() {
      detail::g_recording.store(false, std::memory_order_relaxed);
      g_recorder.store(nullptr, std::memory_order_release);
    }
  };
  {
    Stop stop;
    PhaseScope forward(Phase::Forward);
    fn();
  }
  return recorder->finish();
}
}  // namespace

MemoryTrace dry_run(Device target, const std::function<void()>& fn) {
  return record(target, Device::meta(), fn, "memory::dry_run");
}

MemoryTrace record_step(Device device, const std::function<void()>& fn) {
  return record(device, device, fn, "memory::record_step");
}

}  // namespace mixtrain::memory
