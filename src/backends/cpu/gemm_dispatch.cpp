// Picks the copy of the matrix product (gemm_eigen.h) for the CPU the program runs on, once, and
// splits large products into blocks that depend only on their shape (gemm_blocks.h).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/cpu_isa.h"
#include "kernels/cpu/gemm_bf16.h"
#include "backends/cpu/gemm_blocks.h"
#include "kernels/cpu/gemm_eigen.h"
#include "backends/cpu/threads.h"
#include "base/cpu_features.h"
#include "mixtrain/base/error.h"

namespace mixtrain::backends::cpu {

namespace {

template <class S>
void run_copy(const GemmCall<S>& call) {
  switch (cpu_isa()) {
#if defined(MT_GEMM_HAVE_AVX512)
    case CpuIsa::Avx512: return gemm_avx512::gemm_product(call);
#endif
#if defined(MT_GEMM_HAVE_AVX2)
    case CpuIsa::Avx2: return gemm_avx2::gemm_product(call);
#endif
    default: return gemm_generic::gemm_product(call);
  }
}

// The product of block b: a run of C's rows with A's, or of C's columns with B's.
template <class S>
GemmCall<S> block_call(const GemmCall<S>& call, const GemmBlocks& blocks, int64_t b) {
  const int64_t lo = blocks.begin(b), len = blocks.begin(b + 1) - lo;
  GemmCall<S> part = call;
  if (blocks.split_rows) {
    part.a.data += lo * call.a.row_stride;
    part.a.rows = len;
    part.out += lo * call.ldc;
  } else {
    part.b.data += lo * call.b.col_stride;
    part.b.cols = len;
    part.out += lo;
  }
  return part;
}

// Eigen is built without its own threads (EIGEN_DONT_PARALLELIZE in gemm_eigen.cpp): it split a
// product by the live team size, so a cool-down of the governor changed the result's bits. Here
// the blocks are fixed by the shape; the threads only decide who computes which.
template <class S>
void run(const GemmCall<S>& call) {
  const GemmBlocks blocks = plan_gemm_blocks(call.a.rows, call.b.cols, call.a.cols);
  if (blocks.count == 1) return run_copy(call);
  const int parts = static_cast<int>(std::min<int64_t>(split_threads(), blocks.count));
  auto run_share = [&](int p, int n) {
    for (int64_t b = p * blocks.count / n; b < (p + 1) * blocks.count / n; ++b) run_copy(block_call(call, blocks, b));
  };
  if (parts <= 1) return run_share(0, 1);
  run_parallel(parts, run_share);
}

// The vdpbf16ps kernel needs AVX512_BF16 and rides on the AVX-512 choice, so a MIXTRAIN_CPU_ISA
// cap turns it off too.
bool bf16_detected() {
#if defined(__x86_64__) && defined(MT_GEMM_HAVE_AVX512BF16) && defined(MT_GEMM_HAVE_AVX512)
  if (cpu_isa() != CpuIsa::Avx512 || !detail::cpu_has_avx512_bf16()) return false;
  const char* env = std::getenv("MIXTRAIN_CPU_BF16_GEMM");
  return env == nullptr || std::strcmp(env, "0") != 0;
#else
  return false;
#endif
}

bool bf16_possible() {
#if defined(__x86_64__) && defined(MT_GEMM_HAVE_AVX512BF16) && defined(MT_GEMM_HAVE_AVX512)
  static const bool possible = cpu_isa() == CpuIsa::Avx512 && detail::cpu_has_avx512_bf16();
  return possible;
#else
  return false;
#endif
}

std::atomic<int> bf16_override{-1};
std::atomic<int64_t> bf16_calls{0};

template <class S>
void run_bf16(const GemmBf16Call<S>& call) {
#if defined(MT_GEMM_HAVE_AVX512BF16)
  bf16_calls.fetch_add(1, std::memory_order_relaxed);
  gemm_avx512bf16::gemm_product(call);
#else
  (void)call;
  MT_ERROR("gemm: the bf16 kernel is not built into this library");
#endif
}

}  // namespace

bool bf16_gemm_enabled() {
  static const bool detected = bf16_detected();
  const int mode = bf16_override.load(std::memory_order_relaxed);
  return mode < 0 ? detected : mode == 1 && bf16_possible();
}

void set_bf16_gemm_override(int mode) { bf16_override.store(mode < 0 ? -1 : mode != 0, std::memory_order_relaxed); }

int64_t gemm_bf16_calls() { return bf16_calls.load(std::memory_order_relaxed); }

void gemm_bf16_product(const GemmBf16Call<uint16_t>& call) { run_bf16(call); }
void gemm_bf16_product(const GemmBf16Call<float>& call) { run_bf16(call); }

void gemm_product(const GemmCall<float>& call) { run(call); }
void gemm_product(const GemmCall<double>& call) { run(call); }

const char* gemm_isa() {
  switch (cpu_isa()) {
    case CpuIsa::Avx512: return "avx512";
    case CpuIsa::Avx2: return "avx2";
    default: return "generic";
  }
}

}  // namespace mixtrain::backends::cpu
