// The oneDNN kernels' shared machinery (engine.h).
#include "mixtrain/config.h"
#if defined(MIXTRAIN_WITH_ONEDNN)

#include "backends/cpu/onednn/engine.h"

#include <array>
#include <cstdlib>
#include <cstring>

namespace mixtrain::backends::cpu::onednn {

const dnnl::engine& engine() {
  static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

void AlignedBuffer::Free::operator()(void* p) const { std::free(p); }

AlignedBuffer::AlignedBuffer(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  MT_CHECK(p != nullptr, "oneDNN: cannot allocate ", bytes, " bytes of host memory");
  data_.reset(p);
}

void* thread_buffer(Slot slot, size_t bytes) {
  struct Held {
    std::unique_ptr<AlignedBuffer> buffer;
    size_t bytes = 0;
  };
  thread_local std::array<Held, static_cast<size_t>(Slot::Count)> held;
  Held& h = held[static_cast<size_t>(slot)];
  if (h.bytes < bytes || !h.buffer) {
    h.buffer.reset();  // the old block first: the new one may be as large as memory allows
    h.buffer = std::make_unique<AlignedBuffer>(bytes);
    h.bytes = bytes;
  }
  return h.buffer->data();
}

dnnl::memory wrap(const dnnl::memory::desc& md, const void* p) {
  return dnnl::memory(md, engine(), const_cast<void*>(p));
}

void execute(const dnnl::primitive& prim, const dnnl::memory::desc& scratchpad,
             std::unordered_map<int, dnnl::memory> args) {
  const size_t bytes = scratchpad.get_size();
  if (bytes > 0) args.emplace(DNNL_ARG_SCRATCHPAD, wrap(scratchpad, thread_buffer(Slot::Scratchpad, bytes)));
  prim.execute(stream(), args);
  stream().wait();
}

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

Reorder make_reorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
  const dnnl::reorder::primitive_desc pd(engine(), from, engine(), to, user_scratchpad());
  return {dnnl::reorder(pd), from, to, pd.scratchpad_desc()};
}

void run_reorder(const Reorder& r, const void* src, void* dst) {
  execute(r.prim, r.scratchpad, {{DNNL_ARG_FROM, wrap(r.from, src)}, {DNNL_ARG_TO, wrap(r.to, dst)}});
}

bool fast_impl(const char* impl) { return impl != nullptr && std::strncmp(impl, "ref", 3) != 0; }

void fail(const char* op, const std::function<std::string()>& operands, const dnnl::error& e) {
  MT_ERROR(op, ": oneDNN failed on ", operands(), ": ", e.what(), " (status ", static_cast<int>(e.status),
           "); MIXTRAIN_ONEDNN=0 runs the CPU's own kernels");
}

void run_parts(int parts, const char* op, const std::function<std::string()>& operands,
               const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> failure(static_cast<size_t>(parts));
  auto run_one = [&](int part) {
    try {
      OneThread one;
      body(part);
    } catch (...) {
      failure[static_cast<size_t>(part)] = std::current_exception();
    }
  };
  if (parts <= 1 || in_region() || omp_in_parallel()) {
    for (int part = 0; part < parts; ++part) run_one(part);
  } else {
    run_parallel(parts, [&](int part, int) { run_one(part); });
  }
  for (const std::exception_ptr& e : failure) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const dnnl::error& d) {
      fail(op, operands, d);
    }
  }
}

}  // namespace mixtrain::backends::cpu::onednn

#endif  // MIXTRAIN_WITH_ONEDNN
