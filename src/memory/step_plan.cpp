// Recording a real step's requests, planning its in-step buffers into an arena, and replaying
// steps from the arena (include/mixtrain/memory/step_plan.h, docs/MEMORY.md "Static plans").
#include "mixtrain/memory/step_plan.h"

#include <algorithm>
#include <sstream>
#include <string>
#include <unordered_map>

#include "memory/step_session.h"
#include "mixtrain/base/error.h"

namespace mixtrain::memory {
namespace detail {

// The request stream of one recorded step.
class Recording {
 public:
  struct Request {
    size_t nbytes, rounded;
    int64_t alloc_event, free_event;  // free_event -1: not freed during the step
  };
  struct Event {
    int64_t request;  // -1: a free of memory allocated before the step
    size_t rounded;
    bool alloc;
  };

  void served(void* ptr, size_t nbytes, size_t rounded) {
    const auto r = static_cast<int64_t>(requests.size());
    open[ptr] = r;
    requests.push_back({nbytes, rounded, static_cast<int64_t>(events.size()), -1});
    events.push_back({r, rounded, true});
  }
  void freed(void* ptr, size_t rounded) {
    auto it = open.find(ptr);
    if (it == open.end()) {
      events.push_back({-1, rounded, false});
      return;
    }
    requests[static_cast<size_t>(it->second)].free_event = static_cast<int64_t>(events.size());
    events.push_back({it->second, rounded, false});
    open.erase(it);
  }

  std::vector<Request> requests;
  std::vector<Event> events;
  std::unordered_map<void*, int64_t> open;
  int64_t allocated_at_start = 0;  // the allocator's allocated bytes, less any arena of the plan
};

// What a replay follows: the recorded requests, which of them are arena buffers, and where.
struct PlanLayout {
  struct Request {
    size_t nbytes;
    int64_t buffer;  // the arena buffer it becomes; -1: it outlived the recorded step
  };
  std::vector<Request> requests;          // every allocate() of the recorded step, in order
  std::vector<BufferLifetime> lifetimes;  // per buffer (buffers are numbered in request order)
  std::vector<int64_t> frees_before;      // per buffer: buffer frees recorded before its request
  std::vector<int64_t> free_order;        // buffers in the order they were freed
  ArenaPlan plan;
  size_t other_peak = 0;

  size_t arena_block() const { return plan.arena_bytes ? plan.arena_bytes + CachingAllocator::kMinBlockSize : 0; }
};

PlanLayout layout_of(const Recording& rec) {
  PlanLayout l;
  std::vector<int64_t> buffer_of(rec.requests.size(), -1);
  for (size_t r = 0; r < rec.requests.size(); ++r) {
    const Recording::Request& q = rec.requests[r];
    if (q.free_event >= 0) {
      buffer_of[r] = static_cast<int64_t>(l.lifetimes.size());
      l.lifetimes.push_back({q.rounded, q.alloc_event, q.free_event});
    }
    l.requests.push_back({q.nbytes, buffer_of[r]});
  }
  // In event order: how many buffer frees precede each buffer's request, the free order, and the
  // peak of everything allocated beside the buffers.
  l.frees_before.resize(l.lifetimes.size());
  int64_t total = rec.allocated_at_start, in_step = 0, other_peak = total;
  for (const Recording::Event& e : rec.events) {
    const int64_t b = e.request >= 0 ? buffer_of[static_cast<size_t>(e.request)] : -1;
    const auto bytes = static_cast<int64_t>(e.rounded);
    if (e.alloc) {
      total += bytes;
      if (b >= 0) {
        in_step += bytes;
        l.frees_before[static_cast<size_t>(b)] = static_cast<int64_t>(l.free_order.size());
      }
    } else {
      total -= bytes;
      if (b >= 0) {
        in_step -= bytes;
        l.free_order.push_back(b);
      }
    }
    other_peak = std::max(other_peak, total - in_step);
  }
  l.other_peak = static_cast<size_t>(std::max<int64_t>(other_peak, 0));
  l.plan = plan_arena(l.lifetimes);
  return l;
}

// Empty when the layout fits under the allocator's limit; else why not.
std::string over_limit(const PlanLayout& l, const CachingAllocator& a) {
  const int64_t limit = a.options().limit_bytes();
  const size_t need = l.arena_block() + l.other_peak;
  if (limit < 0 || need <= static_cast<size_t>(limit)) return {};
  std::ostringstream os;
  os << "the plan needs " << need << " bytes on " << a.device() << " (an arena of " << l.arena_block()
     << " bytes for the step's " << l.lifetimes.size() << " in-step buffers, beside " << l.other_peak
     << " bytes that live outside it), more than the memory limit of " << limit << " bytes (MIXTRAIN_MEMORY_LIMIT_MB)";
  return os.str();
}

struct PlanState {
  CachingAllocator* allocator = nullptr;
  PlanLayout layout;
  Arena* arena = nullptr;
  bool calibrated = false;  // a replay has run: the first one re-records (see PlanReplay)
  std::atomic<bool> running{false};

  ~PlanState() {
    if (arena) allocator->retire_arena(arena);
  }
};

// ----------------------------------------------------------------------------------------------
// Recording

class PlanRecorder::Session : public StepSession {
 public:
  using StepSession::StepSession;
  void* allocate(size_t) override { return nullptr; }
  bool deallocate(void*) override { return false; }
  void served(void* ptr, size_t nbytes, size_t rounded) override { rec.served(ptr, nbytes, rounded); }
  void freed(void* ptr, size_t rounded) override { rec.freed(ptr, rounded); }
  Recording rec;
};

PlanRecorder::PlanRecorder(CachingAllocator& allocator) : allocator_(&allocator) {
  MT_CHECK(!current_step_session(), "plan_step: a plan is already recording or running on this thread");
  session_ = std::make_unique<Session>(allocator);
  session_->rec.allocated_at_start = allocator.stats().allocated_bytes;
  install_step_session(session_.get());
}

PlanRecorder::~PlanRecorder() {
  if (current_step_session() == session_.get()) install_step_session(nullptr);
}

std::shared_ptr<PlanState> PlanRecorder::finish() {
  install_step_session(nullptr);
  auto state = std::make_shared<PlanState>();
  state->allocator = allocator_;
  state->layout = layout_of(session_->rec);
  const std::string refused = over_limit(state->layout, *allocator_);
  MT_CHECK(refused.empty(), "plan_step: ", refused, "; no plan was made");
  if (state->layout.plan.arena_bytes) state->arena = allocator_->create_arena(state->layout.plan.arena_bytes);
  return state;
}

// ----------------------------------------------------------------------------------------------
// Replay

class PlanReplay::Session : public StepSession {
 public:
  Session(CachingAllocator& allocator, PlanState& state, bool record)
      : StepSession(allocator),
        s_(state),
        l_(state.layout),
        base_(state.arena ? state.arena->base : nullptr),
        end_(state.arena ? state.arena->base + state.arena->bytes : nullptr),
        num_buffers_(static_cast<int64_t>(state.layout.lifetimes.size())) {
    if (record) {
      rec_ = std::make_unique<Recording>();
      rec_->allocated_at_start =
          allocator.stats().allocated_bytes - static_cast<int64_t>(state.layout.arena_block());
    }
  }

  void* allocate(size_t nbytes) override {
    void* p = arena_allocate(nbytes);
    if (p && rec_) rec_->served(p, nbytes, CachingAllocator::round_size(nbytes));
    return p;
  }

  bool deallocate(void* ptr) override {
    char* p = static_cast<char*>(ptr);
    if (p < base_ || p >= end_) return false;
    if (rec_) rec_->freed(ptr, 0);  // the size only matters for frees of memory from before the step
    s_.arena->live.fetch_sub(1, std::memory_order_acq_rel);
    if (missed_) return true;
    // The buffer the recording freed next, if it was handed out: live buffers never share an
    // address, so its address identifies it.
    if (frees_done_ < num_buffers_) {
      const int64_t b = l_.free_order[static_cast<size_t>(frees_done_)];
      if (b < allocs_done_ && base_ + l_.plan.offsets[static_cast<size_t>(b)] == p) {
        ++frees_done_;
        return true;
      }
    }
    miss();
    return true;
  }

  void served(void* ptr, size_t nbytes, size_t rounded) override {
    if (rec_) rec_->served(ptr, nbytes, rounded);
  }
  void freed(void* ptr, size_t rounded) override {
    if (rec_) rec_->freed(ptr, rounded);
  }

  // At the end of the step: one that stopped short of the recording, or let an arena buffer
  // escape (still live: the next run takes a fresh arena), counts as a miss too.
  void finish(bool completed) {
    if (allocs_done_ < num_buffers_ || frees_done_ < num_buffers_) miss();
    if (s_.arena && s_.arena->live.load(std::memory_order_acquire) != 0) miss();
    if (rec_ && completed) s_.calibrated = !missed_ || adopt_this_step();
    s_.running.store(false);
  }

 private:
  void* arena_allocate(size_t nbytes) {
    if (missed_) return nullptr;
    const auto& req = l_.requests;
    // What the recorded step allocated to keep, and this one does not (the optimizer state a
    // first step creates), is passed over; a request the plan does not expect is a miss.
    while (cursor_ < req.size() && req[cursor_].buffer < 0 && req[cursor_].nbytes != nbytes) ++cursor_;
    if (cursor_ == req.size() || req[cursor_].nbytes != nbytes) return miss();
    const int64_t b = req[cursor_++].buffer;
    if (b < 0) return nullptr;  // outlives the step: the caching allocator's
    if (!base_) return miss();  // no arena (see PlanReplay)
    // Its bytes are free only if every buffer freed before it in the recording is freed now.
    if (frees_done_ != l_.frees_before[static_cast<size_t>(b)]) return miss();
    ++allocs_done_;
    s_.arena->live.fetch_add(1, std::memory_order_relaxed);
    allocator()->count_plan_hit();
    return base_ + l_.plan.offsets[static_cast<size_t>(b)];
  }

  void* miss() {
    if (!missed_) {
      missed_ = true;
      allocator()->count_plan_miss();
    }
    return nullptr;
  }

  // The first replay missed. When its in-step requests are those recorded, it differed only in
  // requests that outlive the step: state that the recorded first step created lazily (Adam's
  // moments), whose sizes may coincide with an in-step request. This step is then the steady
  // state and the plan follows it from now on. Another step (a partial batch) is not adopted,
  // nor is a layout over the limit; the next replay tries again.
  bool adopt_this_step() {
    PlanLayout next = layout_of(*rec_);
    if (!same_buffers(next, l_) || !over_limit(next, *allocator()).empty()) return false;
    const bool reuse = s_.arena && s_.arena->live.load(std::memory_order_acquire) == 0 &&
                       s_.arena->bytes >= next.plan.arena_bytes;
    if (!reuse) {
      Arena* old = s_.arena;
      s_.arena = nullptr;
      allocator()->retire_arena(old);
      // Without an arena the plan still replays, all from the caching allocator, missing each step.
      try {
        if (next.plan.arena_bytes) s_.arena = allocator()->create_arena(next.plan.arena_bytes);
      } catch (const Error&) {
        return false;
      }
    }
    s_.layout = std::move(next);
    return true;
  }

  static bool same_buffers(const PlanLayout& a, const PlanLayout& b) {
    if (a.lifetimes.size() != b.lifetimes.size() || a.free_order != b.free_order || a.frees_before != b.frees_before)
      return false;
    std::vector<size_t> sa, sb;
    for (const auto& r : a.requests)
      if (r.buffer >= 0) sa.push_back(r.nbytes);
    for (const auto& r : b.requests)
      if (r.buffer >= 0) sb.push_back(r.nbytes);
    return sa == sb;
  }

  PlanState& s_;
  const PlanLayout& l_;
  char* base_;
  char* end_;
  int64_t num_buffers_;
  size_t cursor_ = 0;
  int64_t allocs_done_ = 0, frees_done_ = 0;
  bool missed_ = false;
  std::unique_ptr<Recording> rec_;
};

PlanReplay::PlanReplay(PlanState& state) {
  MT_CHECK(!current_step_session(), "StepPlan::run: a plan is already recording or running on this thread");
  MT_CHECK(!state.running.exchange(true), "StepPlan::run: this plan is already running on another thread");
  try {
    // A buffer of the last step escaped it: its bytes stay its own, and this step takes a new
    // arena. So does a plan whose new arena could not be made when it adopted a step.
    const bool escaped = state.arena && state.arena->live.load(std::memory_order_acquire) != 0;
    if (escaped || (!state.arena && state.layout.plan.arena_bytes)) {
      Arena* old = state.arena;
      state.arena = nullptr;
      state.allocator->retire_arena(old);
      state.arena = state.allocator->create_arena(state.layout.plan.arena_bytes);
    }
    session_ = std::make_unique<Session>(*state.allocator, state, !state.calibrated);
  } catch (...) {
    state.running.store(false);
    throw;
  }
  install_step_session(session_.get());
}

void PlanReplay::finish() {
  install_step_session(nullptr);
  session_->finish(true);
  session_.reset();
}

PlanReplay::~PlanReplay() {
  if (!session_) return;
  install_step_session(nullptr);
  session_->finish(false);
}

CachingAllocator& caching_allocator_of(Device device) {
  Allocator& a = allocator_for(device);
  auto* caching = dynamic_cast<CachingAllocator*>(&a);
  MT_CHECK(caching, "plan_step: the allocator of ", device, " is ", a.name(),
           ", not a CachingAllocator; static plans replay through the caching allocator");
  return *caching;
}

}  // namespace detail

// ----------------------------------------------------------------------------------------------
// StepPlan

size_t StepPlan::arena_bytes() const { return state_->layout.plan.arena_bytes; }
size_t StepPlan::lower_bound_bytes() const { return state_->layout.plan.lower_bound_bytes; }
size_t StepPlan::first_fit_bytes() const { return state_->layout.plan.first_fit_bytes; }
size_t StepPlan::other_peak_bytes() const { return state_->layout.other_peak; }
int64_t StepPlan::num_requests() const { return static_cast<int64_t>(state_->layout.requests.size()); }
int64_t StepPlan::num_planned() const { return static_cast<int64_t>(state_->layout.lifetimes.size()); }
const std::vector<BufferLifetime>& StepPlan::lifetimes() const { return state_->layout.lifetimes; }
const ArenaPlan& StepPlan::arena_plan() const { return state_->layout.plan; }

}  // namespace mixtrain::memory
