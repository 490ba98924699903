// Host side of fused scaled-dot-product attention on CUDA (kernels/attention.cu): checks the
// operands against backends/attention.h's contract and enqueues on the device's stream.
#include "backends/attention.h"
#include "backends/cuda/context.h"
#include "backends/cuda/operands.h"
#include "backends/cuda/workspace.h"
#include "kernels/cuda/attention.h"

namespace mixtrain::backends::cuda {

namespace {

DType lse_dtype(DType dt) { return dt == kFloat64 ? kFloat64 : kFloat32; }

void check_operands(const char* op, const AttentionShape& sh, std::initializer_list<std::pair<const Tensor*, Shape>> ts,
                    const Tensor& lse) {
  const DType dt = ts.begin()->first->dtype();
  for (const auto& [t, shape] : ts)
    MT_CHECK(t->is_contiguous() && t->dtype() == dt && t->numel() == shape_numel(shape), op, ": expected contiguous ",
             dtype_name(dt), " operands of ", shape_numel(shape), " elements, got ", t->summary());
  MT_CHECK(lse.is_contiguous() && lse.dtype() == lse_dtype(dt) && lse.numel() == sh.batch * sh.l, op,
           ": expected a contiguous ", dtype_name(lse_dtype(dt)), " logsumexp of ", sh.batch * sh.l, " elements, got ",
           lse.summary());
  MT_CHECK(sh.s >= 1 && sh.e >= 1 && sh.ev >= 1 && sh.e < (1 << 20) && sh.ev < (1 << 20), op,
           ": unsupported sizes L=", sh.l, " S=", sh.s, " E=", sh.e, " Ev=", sh.ev);
  MT_CHECK(sh.dropout_p >= 0.0 && sh.dropout_p < 1.0, op, ": dropout probability must be in [0, 1), got ",
           sh.dropout_p);
}

kernels::AttentionDims dims(const AttentionShape& sh) {
  return {sh.batch, sh.l, sh.s, sh.e, sh.ev, sh.scale, sh.causal, sh.dropout_p, sh.seed, sh.offset};
}

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionShape& sh, const Tensor& out,
                       const Tensor& lse) {
  check_device("attention_forward", out.device(), {&q, &k, &v, &lse});
  const int64_t b = sh.batch;
  check_operands("attention_forward", sh,
                 {{&q, {b, sh.l, sh.e}}, {&k, {b, sh.s, sh.e}}, {&v, {b, sh.s, sh.ev}}, {&out, {b, sh.l, sh.ev}}}, lse);
  kernels::attention_forward(q.dtype(), q.raw_data(), k.raw_data(), v.raw_data(), dims(sh), out.raw_data(),
                             lse.raw_data(), context(out).stream);
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& grad_out,
                        const Tensor& lse, const AttentionShape& sh, const Tensor& grad_q, const Tensor& grad_k,
                        const Tensor& grad_v) {
  check_device("attention_backward", q.device(), {&k, &v, &out, &grad_out, &lse, &grad_q, &grad_k, &grad_v});
  const int64_t b = sh.batch;
  check_operands("attention_backward", sh,
                 {{&q, {b, sh.l, sh.e}},
                  {&k, {b, sh.s, sh.e}},
                  {&v, {b, sh.s, sh.ev}},
                  {&out, {b, sh.l, sh.ev}},
                  {&grad_out, {b, sh.l, sh.ev}},
                  {&grad_q, {b, sh.l, sh.e}},
                  {&grad_k, {b, sh.s, sh.e}},
                  {&grad_v, {b, sh.s, sh.ev}}},
                 lse);
  const kernels::AttentionDims d = dims(sh);
  const size_t ws_bytes = attention_workspace_bytes(q.dtype(), d.batch, d.l);
  const Tensor ws = ws_bytes ? scratch(ws_bytes, q.device()) : Tensor();
  kernels::attention_backward(q.dtype(), q.raw_data(), k.raw_data(), v.raw_data(), out.raw_data(), grad_out.raw_data(),
                              lse.raw_data(), d, grad_q.raw_data(), grad_k.raw_data(), grad_v.raw_data(), ptr(ws),
                              context(q).stream);
}

void register_attention() {
  backends::attention_forward.set(DeviceType::CUDA, attention_forward);
  backends::attention_backward.set(DeviceType::CUDA, attention_backward);
}

}  // namespace mixtrain::backends::cuda
