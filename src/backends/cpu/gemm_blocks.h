#pragma once
// How the CPU backend cuts a large matrix product into blocks of output rows or columns, each
// computed by one single-threaded GEMM (gemm_dispatch.cpp). The cut depends only on the shape,
// never on the thread count or the governor (threads.h): every output element is computed by the
// same operations on one thread, so the result keeps every bit whether the blocks run on a team,
// in turn on one thread during a cool-down, or inside another parallel region (docs/CPU.md).
#include <algorithm>
#include <cstdint>

namespace mixtrain::backends::cpu {

struct GemmBlocks {
  // The blocks cut C's rows (else its columns): the other operand is packed once per block, so
  // the cut goes along the longer side of C and the smaller operand is the one packed again.
  bool split_rows = false;
  int64_t count = 1;   // 1: one GEMM for the whole product
  int64_t extent = 0;  // C's rows (split_rows) or columns

  // Block b covers [begin(b), begin(b + 1)). Inner bounds are multiples of 16 elements, so a
  // block's first column starts on the same vector alignment as the matrix's.
  int64_t begin(int64_t b) const { return b >= count ? extent : (b * extent / count) / 16 * 16; }
};

// Blocks are at least this wide on average: the operand not cut is packed again for each block,
// an overhead of about one packed element per `width` multiply-adds...
constexpr int64_t kGemmBlockMinWidth = 64;
// ...and at least this many multiply-adds (smaller ones do not pay for waking a thread)...
constexpr int64_t kGemmBlockMinMacs = int64_t{1} << 17;
// ...and there are at most this many (so a GEMM runs on at most 16 threads; more blocks would
// pack the other operand more often).
constexpr int64_t kGemmMaxBlocks = 16;

// The cut of C[m, n] = A[m, k] B[k, n]: a power of two of blocks, so that 2, 4, 8... threads get
// equal shares.
inline GemmBlocks plan_gemm_blocks(int64_t m, int64_t n, int64_t k) {
  GemmBlocks blocks;
  blocks.split_rows = m > n;
  blocks.extent = blocks.split_rows ? m : n;
  const int64_t macs = m * n * k;
  const int64_t most = std::min({kGemmMaxBlocks, blocks.extent / kGemmBlockMinWidth, macs / kGemmBlockMinMacs});
  while (blocks.count * 2 <= most) blocks.count *= 2;
  return blocks;
}

}  // namespace mixtrain::backends::cpu
