// The oneDNN kernels' shared machinery (engine.h).
#include "mixtrain/config.h"
#if defined(MIXTRAIN_WITH_ONEDNN)

#include "backends/cpu/onednn/engine.h"

#include <array>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/onednn/onednn.h"
#include "mixtrain/base/half.h"

namespace mixtrain::backends::cpu::onednn {

namespace {

// MIXTRAIN_CPU_ISA's cap (cpu_isa.h) given to oneDNN, which takes one only before its first
// primitive: so once, before the engine exists and before any ISA query. A cap the user gave
// oneDNN itself (ONEDNN_MAX_CPU_ISA) is left to oneDNN.
void cap_isa_once() {
  static const bool capped = [] {
    const CpuIsa cap = cpu_isa_cap();
    if (cap == CpuIsa::Avx512 || std::getenv("ONEDNN_MAX_CPU_ISA") || std::getenv("DNNL_MAX_CPU_ISA")) return true;
    const dnnl::cpu_isa isa = cap == CpuIsa::Avx2 ? dnnl::cpu_isa::avx2 : dnnl::cpu_isa::sse41;
    const dnnl::status st = dnnl::set_max_cpu_isa(isa);
    MT_CHECK(st == dnnl::status::success, "MIXTRAIN_CPU_ISA=", std::getenv("MIXTRAIN_CPU_ISA"),
             ": oneDNN refused to cap its instruction set (status ", static_cast<int>(st),
             "); set ONEDNN_MAX_CPU_ISA before the process starts instead");
    return true;
  }();
  (void)capped;
}

}  // namespace

const dnnl::engine& engine() {
  cap_isa_once();
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

float* wide_buffer(int64_t n, Slot slot) {
  return static_cast<float*>(thread_buffer(slot, static_cast<size_t>(n) * sizeof(float)));
}

const float* widen(const void* from, int64_t n, Slot slot) {
  float* out = wide_buffer(n, slot);
  convert_parallel(static_cast<const BFloat16*>(from), n, out);
  return out;
}

void narrow(const float* from, void* to, int64_t n) { convert_parallel(from, n, static_cast<BFloat16*>(to)); }

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

namespace mixtrain::backends::cpu {

bool onednn_runs_bf16() {
  onednn::cap_isa_once();
  static const bool runs = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto core = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
    return (isa & core) == core;  // the ISAs are bit sets: avx2_vnni is numerically larger, but not AVX-512
  }();
  return runs;
}

}  // namespace mixtrain::backends::cpu

#else  // without oneDNN

#include "backends/cpu/onednn/onednn.h"

namespace mixtrain::backends::cpu {

bool onednn_runs_bf16() { return false; }

}  // namespace mixtrain::backends::cpu

#endif  // MIXTRAIN_WITH_ONEDNN
