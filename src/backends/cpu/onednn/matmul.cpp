// GEMMs on oneDNN's matmul primitive (onednn.h): fp32, and bf16 with fp32 accumulation, the bias
// added and the ReLU applied in fp32 (oneDNN's bias argument and eltwise post-op) and the result
// rounded once, to nearest even, into the bf16 output. The operands are described in place, with
// their strides (a transposed operand is a column-major one), so nothing is copied or widened:
// oneDNN's brgemm kernel packs its blocks itself, as Eigen does. Weights stay in their plain
// layout: in a training step each weight is a GEMM operand once per direction (forward W^T,
// backward W), so a blocked copy kept between calls would be used once per step anyway.
#include "mixtrain/config.h"

#include "backends/cpu/onednn/onednn.h"

#if defined(MIXTRAIN_WITH_ONEDNN)

#include <algorithm>
#include <utility>

#include "backends/cpu/gemm_blocks.h"
#include "backends/cpu/onednn/engine.h"
#include "backends/cpu/verbose.h"

namespace mixtrain::backends::cpu {

namespace {

using dnnl::memory;

// One operand after its transpose: [rows, cols] with element strides, and its batch stride.
struct Side {
  int64_t rows, cols, rs, cs, bs;
  bool batched;  // a batch of matrices, not one matrix broadcast over the batch
};

bool side_of(const Tensor& t, bool trans, Side& s) {
  const int64_t d = t.dim();
  s = {t.size(d - 2), t.size(d - 1), t.stride(d - 2), t.stride(d - 1), d == 3 ? t.stride(0) : 0,
       d == 3 && t.size(0) > 1 && t.stride(0) != 0};
  if (trans) {
    std::swap(s.rows, s.cols);
    std::swap(s.rs, s.cs);
  }
  // A row or column vector's other stride is free: pick the one that makes it plain.
  if (s.rows == 1 && s.cs != 1) s.rs = 1;
  if (s.cols == 1 && s.rs != 1) s.cs = 1;
  if (s.rows == 1 && s.cs == 1) s.rs = s.cols;
  if (s.cols == 1 && s.rs == 1) s.cs = s.rows;
  if (!s.batched) s.bs = std::max(s.rows * s.rs, s.cols * s.cs);  // a dimension of 1: any stride
  return s.rs == 1 || s.cs == 1;
}

bool dnnl_type(DType t, memory::data_type& out) {
  if (t == kFloat32) out = memory::data_type::f32;
  else if (t == kBFloat16) out = memory::data_type::bf16;
  else return false;
  return true;
}

struct GemmPlan {
  dnnl::matmul prim;
  memory::desc a, b, bias, out, scratchpad;
  std::string impl;
};

// A part of the product: a run of batch entries, or of C's rows or columns.
struct Part {
  int64_t batch0 = 0, batches = 1, row0 = 0, rows = 0, col0 = 0, cols = 0;
};

struct GemmCallPlan {
  Side a, b;
  int64_t batch = 1, m = 0, n = 0, k = 0;
  std::vector<Part> parts;
  std::vector<std::shared_ptr<const GemmPlan>> plans;  // one per part
};

onednn::PlanCache<GemmPlan>& gemm_plans() {
  static onednn::PlanCache<GemmPlan> cache;
  return cache;
}

// The cut: batch entries over the parts, else C's longer side in blocks (gemm_blocks.h), at most
// as many as the backend has threads. Fixed by the shape and the full thread count.
std::vector<Part> cut(int64_t batch, int64_t m, int64_t n, int64_t k) {
  std::vector<Part> parts;
  const int64_t full = onednn::full_parts();
  if (batch > 1) {
    const int64_t count = std::min(full, batch);
    for (int64_t p = 0; p < count; ++p) {
      const int64_t b0 = p * batch / count, b1 = (p + 1) * batch / count;
      parts.push_back({b0, b1 - b0, 0, m, 0, n});
    }
    return parts;
  }
  GemmBlocks blocks = plan_gemm_blocks(m, n, k);
  blocks.count = std::min(blocks.count, full);
  for (int64_t p = 0; p < blocks.count; ++p) {
    const int64_t lo = blocks.begin(p), len = blocks.begin(p + 1) - lo;
    if (len == 0) continue;
    parts.push_back(blocks.split_rows ? Part{0, 1, lo, len, 0, n} : Part{0, 1, 0, m, lo, len});
  }
  return parts;
}

std::shared_ptr<const GemmPlan> plan_part(const GemmCallPlan& c, const Part& part, memory::data_type dt,
                                          bool bias, GemmEpilogue epilogue,
                                          const std::function<std::string()>& operands) {
  const bool batched = c.batch > 1;
  onednn::Key key;
  key << static_cast<int64_t>(dt) << batched << part.batches << part.rows << part.cols << c.k << c.n << c.a.rs
      << c.a.cs << c.a.bs << c.a.batched << c.b.rs << c.b.cs << c.b.bs << c.b.batched << bias
      << static_cast<int64_t>(epilogue);
  return gemm_plans().get(key.str(), [&]() -> std::shared_ptr<const GemmPlan> {
    return onednn::try_plan<GemmPlan>("gemm", operands, [&]() -> std::shared_ptr<const GemmPlan> {
      auto plan = std::make_shared<GemmPlan>();
      if (batched) {
        plan->a = memory::desc({c.a.batched ? part.batches : 1, part.rows, c.k}, dt, {c.a.bs, c.a.rs, c.a.cs});
        plan->b = memory::desc({c.b.batched ? part.batches : 1, c.k, part.cols}, dt, {c.b.bs, c.b.rs, c.b.cs});
        plan->out = memory::desc({part.batches, part.rows, part.cols}, dt, {c.m * c.n, c.n, 1});
        if (bias) plan->bias = memory::desc({1, 1, part.cols}, dt, {part.cols, part.cols, 1});
      } else {
        plan->a = memory::desc({part.rows, c.k}, dt, {c.a.rs, c.a.cs});
        plan->b = memory::desc({c.k, part.cols}, dt, {c.b.rs, c.b.cs});
        plan->out = memory::desc({part.rows, part.cols}, dt, {c.n, 1});
        if (bias) plan->bias = memory::desc({1, part.cols}, dt, {part.cols, 1});
      }
      dnnl::primitive_attr attr = onednn::user_scratchpad();
      if (epilogue == GemmEpilogue::Relu) {
        dnnl::post_ops ops;
        ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
        attr.set_post_ops(ops);
      }
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(plan->a, plan->b, plan->bias, plan->out), attr,
                                            onednn::engine());
      if (!onednn::fast_impl(pd.impl_info_str())) return nullptr;
      plan->impl = pd.impl_info_str();
      plan->scratchpad = pd.scratchpad_desc();
      plan->prim = dnnl::matmul(pd);
      return plan;
    });
  });
}

// The whole call's plan, or false when oneDNN does not take it.
bool prepare(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& out, const Tensor& bias,
             GemmEpilogue epilogue, GemmCallPlan& c) {
  const OneDnnMode mode = onednn_mode();
  memory::data_type dt;
  if (mode == OneDnnMode::Off || !dnnl_type(a.dtype(), dt) || b.dtype() != a.dtype() || out.dtype() != a.dtype())
    return false;
  if (bias.defined() && (bias.dtype() != a.dtype() || bias.stride(0) != 1)) return false;
  if (!out.is_contiguous() || !side_of(a, ta, c.a) || !side_of(b, tb, c.b)) return false;
  c.batch = out.dim() == 3 ? out.size(0) : 1;
  c.m = c.a.rows, c.n = c.b.cols, c.k = c.a.cols;
  if (c.batch == 0 || c.m == 0 || c.n == 0 || c.k == 0) return false;
  const int64_t min_macs = a.dtype() == kBFloat16 ? kOneDnnGemmMinMacsBf16 : kOneDnnGemmMinMacsFp32;
  if (mode == OneDnnMode::Sized && c.batch * c.m * c.n * c.k < min_macs) return false;
  c.parts = cut(c.batch, c.m, c.n, c.k);
  const std::function<std::string()> operands = [&] { return gemm_operands(a, ta, b, tb, bias, epilogue); };
  for (const Part& part : c.parts) {
    c.plans.push_back(plan_part(c, part, dt, bias.defined(), epilogue, operands));
    if (!c.plans.back()) return false;
  }
  return true;
}

}  // namespace

bool onednn_takes_gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& out, const Tensor& bias,
                       GemmEpilogue epilogue) {
  GemmCallPlan c;
  return prepare(a, ta, b, tb, out, bias, epilogue, c);
}

bool onednn_gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& out, const Tensor& bias,
                 GemmEpilogue epilogue, std::string& impl) {
  GemmCallPlan c;
  if (!prepare(a, ta, b, tb, out, bias, epilogue, c)) return false;
  const int64_t es = static_cast<int64_t>(element_size(a.dtype()));
  const char* pa = static_cast<const char*>(a.raw_data());
  const char* pb = static_cast<const char*>(b.raw_data());
  const char* pbias = bias.defined() ? static_cast<const char*>(bias.raw_data()) : nullptr;
  char* pout = static_cast<char*>(out.raw_data());
  onednn::run_parts(
      static_cast<int>(c.parts.size()), "gemm", [&] { return gemm_operands(a, ta, b, tb, bias, epilogue); },
      [&](int p) {
        const Part& part = c.parts[static_cast<size_t>(p)];
        const GemmPlan& plan = *c.plans[static_cast<size_t>(p)];
        std::unordered_map<int, memory> args{
            {DNNL_ARG_SRC, onednn::wrap(plan.a, pa + ((c.a.batched ? part.batch0 * c.a.bs : 0) + part.row0 * c.a.rs) * es)},
            {DNNL_ARG_WEIGHTS, onednn::wrap(plan.b, pb + ((c.b.batched ? part.batch0 * c.b.bs : 0) + part.col0 * c.b.cs) * es)},
            {DNNL_ARG_DST, onednn::wrap(plan.out, pout + (part.batch0 * c.m * c.n + part.row0 * c.n + part.col0) * es)}};
        if (pbias) args.emplace(DNNL_ARG_BIAS, onednn::wrap(plan.bias, pbias + part.col0 * es));
        onednn::execute(plan.prim, plan.scratchpad, std::move(args));
      });
  onednn::calls.fetch_add(1, std::memory_order_relaxed);
  impl = "onednn:" + c.plans.front()->impl;
  return true;
}

}  // namespace mixtrain::backends::cpu

#else  // a library without oneDNN: every call stays on the own kernels

namespace mixtrain::backends::cpu {

bool onednn_takes_gemm(const Tensor&, bool, const Tensor&, bool, const Tensor&, const Tensor&, GemmEpilogue) {
  return false;
}
bool onednn_gemm(const Tensor&, bool, const Tensor&, bool, const Tensor&, const Tensor&, GemmEpilogue, std::string&) {
  return false;
}

}  // namespace mixtrain::backends::cpu

#endif  // MIXTRAIN_WITH_ONEDNN
