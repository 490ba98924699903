// Host side of the GradScaler's kernels on CUDA.
#include <vector>

#include "backends/amp.h"
#include "backends/copy.h"
#include "backends/cuda/context.h"
#include "backends/cuda/operands.h"
#include "backends/cuda/cuda_check.h"
#include "kernels/cuda/amp.h"

namespace mixtrain::backends::cuda {

void non_finite_check_and_unscale(const std::vector<Tensor>& grads, const std::vector<Tensor>& outs,
                                               const Tensor& inv_scale, const Tensor& found_inf, const Tensor& stats) {
  const UnscaleWork w = prepare_unscale(grads, outs, inv_scale, found_inf, stats);
  std::vector<kernels::TensorSpan> spans;
  for (size_t i = 0; i < w.grads.size(); ++i)
    if (w.grads[i].numel() > 0) spans.push_back({w.grads[i].raw_data(), w.outs[i].raw_data(), w.grads[i].numel()});
  if (spans.empty()) return;
  const Device device = found_inf.device();
  const DType gd = w.grad_dtype, od = w.out_dtype;
  DeviceContext& ctx = context(found_inf);
  const int count = static_cast<int>(spans.size());
  const int64_t chunks = kernels::multi_tensor_chunks(spans.data(), count);
  const size_t bytes = kernels::multi_tensor_meta_bytes(count, chunks);
  std::vector<char> host(bytes);
  kernels::pack_multi_tensor_meta(spans.data(), count, host.data());
  const Tensor meta = scratch(bytes, device);
  // From pageable memory the copy returns once staged, so `host` may go at the end of scope.
  MT_CUDA_CHECK(cudaMemcpyAsync(meta.raw_data(), host.data(), bytes, cudaMemcpyHostToDevice, ctx.stream));
  kernels::non_finite_check_and_unscale(gd, od, meta.raw_data(), count, chunks,
                                        kernels::multi_tensor_vectorizable(spans.data(), count, gd, od),
                                        inv_scale.data_ptr<float>(), found_inf.data_ptr<float>(),
                                        stats.defined() ? stats.data_ptr<double>() : nullptr, ctx.stream);
  for (const auto& [work, target] : w.copy_back) backends::copy(DeviceType::CUDA, work, target);
}

void update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& hysteresis_tracker,
                               const Tensor& found_inf, const ScaleUpdateArgs& args, const Tensor& at_min_scale) {
  check_update_scale_args(scale, growth_tracker, hysteresis_tracker, found_inf, at_min_scale);
  kernels::update_scale(scale.data_ptr<float>(), growth_tracker.data_ptr<int32_t>(),
                        hysteresis_tracker.data_ptr<int32_t>(), found_inf.data_ptr<float>(), args,
                        at_min_scale.data_ptr<float>(), context(scale).stream);
}

void register_amp() {
  backends::non_finite_check_and_unscale.set(DeviceType::CUDA, non_finite_check_and_unscale);
  backends::update_scale.set(DeviceType::CUDA, update_scale);
}

}  // namespace mixtrain::backends::cuda
