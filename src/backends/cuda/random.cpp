// Random fills and dropout on CUDA: the counter-based generator, as on the CPU.
#include "backends/random.h"
#include "backends/cuda/context.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/operands.h"
#include "kernels/cuda/random.h"

namespace mixtrain::backends::cuda {

void random(const Tensor& dst, RandomKind kind, uint64_t seed, uint64_t offset) {
  MT_CHECK(dst.is_contiguous(), "random: expected a contiguous output, got ", dst.summary());
  kernels::random(dst.dtype(), dst.raw_data(), dst.numel(), kind, seed, offset, context(dst).stream);
}

void dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset, const Tensor& out) {
  check_device("dropout", out.device(), {&x});
  MT_CHECK(x.is_contiguous() && out.is_contiguous() && x.dtype() == out.dtype() && x.shape() == out.shape(),
           "dropout: expected contiguous input and output of one dtype and shape, got ", x.summary(), " and ", out.summary());
  kernels::dropout(x.dtype(), x.raw_data(), out.raw_data(), x.numel(), p, seed, offset, context(out).stream);
}

void register_random() {
  backends::random.set(DeviceType::CUDA, random);
  backends::dropout.set(DeviceType::CUDA, dropout);
}

}  // namespace mixtrain::backends::cuda
