// The CPU's fused attention kernels give the same bits on one thread and on several: work items
// never share an output and compute alike on whichever thread runs them; the dropout mask is a
// function of each element's position, not of the thread that draws it.
#include <omp.h>

#include "backends/attention.h"
#include "backends/cpu/threads.h"
#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
using namespace mixtrain::testing;

namespace {

struct Result {
  mt::Tensor out, lse, dq, dk, dv;
};

Result run_kernels(const mt::backends::AttentionShape& sh, const std::vector<mt::Tensor>& in) {
  const mt::DType dt = in[0].dtype();
  Result r{mt::empty({sh.batch, sh.l, sh.ev}, mt::TensorOptions(dt)), mt::empty({sh.batch, sh.l}, mt::TensorOptions(mt::kFloat32)), mt::empty_like(in[0]),
           mt::empty_like(in[1]), mt::empty_like(in[2])};
  mt::backends::attention_forward(in[0], in[0], in[1], in[2], sh, r.out, r.lse);
  mt::backends::attention_backward(in[0], in[0], in[1], in[2], r.out, in[3], r.lse, sh, r.dq, r.dk, r.dv);
  return r;
}

}  // namespace

// One thread: the kernels called inside a parallel region, where they split into one part.
TEST(CpuAttention, ResultsDoNotDependOnTheThreadCount) {
  if (mt::backends::cpu::governor().full() < 2)
    GTEST_SKIP() << "the CPU backend has one thread here (OMP_NUM_THREADS, affinity or one CPU): nothing to compare";
  for (mt::DType dt : {mt::kFloat32, mt::kBFloat16}) {
    for (const auto& [causal, dropout] : {std::pair{false, 0.0}, std::pair{true, 0.0}, std::pair{true, 0.2}}) {
      SCOPED_TRACE(std::string(mt::dtype_name(dt)) + (causal ? " causal" : "") + " dropout " + std::to_string(dropout));
      mt::backends::AttentionShape sh{3, 150, 150, 16, 16, 0.25, causal};
      sh.dropout_p = dropout;
      sh.seed = 9;
      sh.offset = 5;
      const std::vector<mt::Tensor> in{random_tensor({3, 150, 16}, dt, 1), random_tensor({3, 150, 16}, dt, 2),
                                       random_tensor({3, 150, 16}, dt, 3), random_tensor({3, 150, 16}, dt, 4)};
      const Result many = run_kernels(sh, in);
      Result one;
#pragma omp parallel num_threads(2)
      {
        if (omp_get_thread_num() == 0) one = run_kernels(sh, in);
      }
      ASSERT_TRUE(one.out.defined());
      EXPECT_EQ(bytes_of(many.out), bytes_of(one.out));
      EXPECT_EQ(bytes_of(many.lse), bytes_of(one.lse));
      EXPECT_EQ(bytes_of(many.dq), bytes_of(one.dq));
      EXPECT_EQ(bytes_of(many.dk), bytes_of(one.dk));
      EXPECT_EQ(bytes_of(many.dv), bytes_of(one.dv));
    }
  }
}
