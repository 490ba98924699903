// GEMMs on oneDNN's matmul primitive (onednn.h): fp32, and bf16 with fp32 accumulation, the bias
// added and the ReLU applied in fp32 (oneDNN's bias argument and eltwise post-op) and the result
// rounded once, to nearest even, into the bf16 output. The operands are described in place, with
// their strides (a transposed operand is a column-major one): oneDNN 2.6's brgemm kernel takes
// dense matrices either way round and packs its blocks itself, as Eigen does; a matrix with gaps
// between its rows or columns (a slice of a wider one) would send oneDNN to its gemm:jit
// fallback, several times slower, so such an operand is copied dense first.
// On a CPU where oneDNN has no bf16 (below AVX-512) a bf16 call runs the fp32 primitive: the
// operands are widened (exactly) once per call with the vectorized bulk conversion, into packed
// copies of their layout, and each part's fp32 result is rounded to nearest even into the bf16
// output once, the bias and ReLU applied before: the same contract. (oneDNN 2.6's own bf16 <-> f32
// reorders run on its generic loops there, about 20x slower than the GEMM they feed.)
// Weights stay in their plain layout: in a training step each weight is a GEMM operand once per
// direction (forward W^T, backward W), so a blocked copy kept between calls would be used once
// per step anyway.
#include "mixtrain/config.h"

#include "backends/cpu/onednn/onednn.h"

#if defined(MIXTRAIN_WITH_ONEDNN)

#include <algorithm>
#include <utility>

#include "backends/cpu/gemm_blocks.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/onednn/engine.h"
#include "backends/cpu/verbose.h"
#include "mixtrain/base/half.h"

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
  memory::desc a, b, bias, out, scratchpad;  // what the primitive reads and writes
  onednn::Reorder a_copy, b_copy;            // strided operand -> dense a or b, where needed
  bool copies_a = false, copies_b = false;
  std::string impl;
};

// A part of the product: a run of batch entries, or of C's rows.
struct Part {
  int64_t batch0 = 0, batches = 1, row0 = 0, rows = 0;
};

struct GemmCallPlan {
  Side a, b;
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool widened = false;  // bf16 tensors on fp32 primitives
  Side a_in, b_in;       // widened: the bf16 tensors' own layouts (a and b are the copies')
  std::vector<Part> parts;
  std::vector<std::shared_ptr<const GemmPlan>> plans;  // one per part
};

onednn::PlanCache<GemmPlan>& gemm_plans() {
  static onednn::PlanCache<GemmPlan> cache;
  return cache;
}

// The cut: batch entries over the parts, else runs of C's rows (a run of C's columns would leave
// gaps between C's rows, which brgemm does not take), at most as many as the backend has threads
// and each as wide and as large as gemm_blocks.h asks of a block. Fixed by the shape and the full
// thread count.
std::vector<Part> cut(const GemmCallPlan& c) {
  std::vector<Part> parts;
  const int64_t full = onednn::full_parts(), batch = c.batch, m = c.m;
  if (batch > 1) {
    const int64_t count = std::min(full, batch);
    for (int64_t p = 0; p < count; ++p) {
      const int64_t b0 = p * batch / count, b1 = (p + 1) * batch / count;
      parts.push_back({b0, b1 - b0, 0, m});
    }
    return parts;
  }
  GemmBlocks blocks;
  blocks.split_rows = true;
  blocks.extent = m;
  blocks.count = std::max<int64_t>(1, std::min({full, m / kGemmBlockMinWidth, m * c.n * c.k / kGemmBlockMinMacs}));
  for (int64_t p = 0; p < blocks.count; ++p) {
    const int64_t lo = blocks.begin(p), len = blocks.begin(p + 1) - lo;
    if (len > 0) parts.push_back({0, 1, lo, len});
  }
  return parts;
}

// An operand as oneDNN sees it: [batch?, rows, cols] with our strides, and whether it is dense
// (no gap between its rows or columns, nor between its batch entries) as brgemm needs.
memory::desc operand(const Side& s, int64_t batches, int64_t rows, int64_t cols, bool batched, memory::data_type dt,
                     bool& dense) {
  const bool inner = (s.cs == 1 && s.rs == cols) || (s.rs == 1 && s.cs == rows);
  if (!batched) {
    dense = inner;
    return memory::desc({rows, cols}, dt, {s.rs, s.cs});
  }
  const int64_t b = s.batched ? batches : 1;
  dense = inner && (b == 1 || s.bs == rows * cols);
  return memory::desc({b, rows, cols}, dt, {s.bs, s.rs, s.cs});
}

// The layout of an operand's widened copy: its rows (its columns, if column-major) packed
// without gaps, batch entries one after another.
Side packed(const Side& s) {
  Side p = s;
  if (s.cs == 1) p.rs = s.cols;
  else p.cs = s.rows;
  p.bs = s.rows * s.cols;
  return p;
}

// A bf16 operand `s` at `from` widened to fp32 in the layout packed(s), in this thread's `slot`.
const char* widened(const void* from, const Side& s, int64_t batch, onednn::Slot slot) {
  const Side p = packed(s);
  const int64_t entries = s.batched ? batch : 1;
  const bool by_rows = s.cs == 1;
  const int64_t lines = by_rows ? s.rows : s.cols, length = by_rows ? s.cols : s.rows;
  auto* out = static_cast<float*>(
      onednn::thread_buffer(slot, static_cast<size_t>(entries * s.rows * s.cols) * sizeof(float)));
  const auto* in = static_cast<const BFloat16*>(from);
  const int64_t in_line = by_rows ? s.rs : s.cs, out_line = by_rows ? p.rs : p.cs;
  parallel_for(entries * lines, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(length, 1)),
               [&](int64_t i0, int64_t i1) {
                 for (int64_t i = i0; i < i1; ++i) {
                   const int64_t e = i / lines, l = i % lines;
                   bf16_to_float_array(in + e * s.bs + l * in_line, out + e * p.bs + l * out_line, length);
                 }
               });
  return reinterpret_cast<const char*>(out);
}

// Where an operand that is not dense is copied to: the same matrix, row-major and dense.
memory::desc dense_copy(const memory::desc& md, memory::data_type dt) {
  const memory::dims dims = md.dims();
  return memory::desc(dims, dt, dims.size() == 3 ? memory::format_tag::abc : memory::format_tag::ab);
}

// `widen`: bf16 tensors, fp32 primitive (no bf16 in oneDNN here).
std::shared_ptr<const GemmPlan> plan_part(const GemmCallPlan& c, const Part& part, memory::data_type dt, bool widen,
                                          bool bias, GemmEpilogue epilogue,
                                          const std::function<std::string()>& operands) {
  const bool batched = c.batch > 1;
  const memory::data_type cdt = widen ? memory::data_type::f32 : dt;
  onednn::Key key;
  key << static_cast<int64_t>(dt) << widen << batched << part.batches << part.rows << c.k << c.n << c.a.rs << c.a.cs << c.a.bs
      << c.a.batched << c.b.rs << c.b.cs << c.b.bs << c.b.batched << bias << static_cast<int64_t>(epilogue);
  return gemm_plans().get(key.str(), [&]() -> std::shared_ptr<const GemmPlan> {
    return onednn::try_plan<GemmPlan>("gemm", operands, [&]() -> std::shared_ptr<const GemmPlan> {
      auto plan = std::make_shared<GemmPlan>();
      bool a_dense = true, b_dense = true;
      const memory::desc a = operand(c.a, part.batches, part.rows, c.k, batched, cdt, a_dense);
      const memory::desc b = operand(c.b, part.batches, c.k, c.n, batched, cdt, b_dense);
      plan->a = a_dense ? a : dense_copy(a, cdt);
      plan->b = b_dense ? b : dense_copy(b, cdt);
      if (!a_dense) plan->copies_a = true, plan->a_copy = onednn::make_reorder(a, plan->a);
      if (!b_dense) plan->copies_b = true, plan->b_copy = onednn::make_reorder(b, plan->b);
      const memory::dims out_dims = batched ? memory::dims{part.batches, part.rows, c.n} : memory::dims{part.rows, c.n};
      const memory::format_tag tag = batched ? memory::format_tag::abc : memory::format_tag::ab;
      plan->out = memory::desc(out_dims, cdt, tag);
      if (bias) plan->bias = memory::desc(batched ? memory::dims{1, 1, c.n} : memory::dims{1, c.n}, cdt, tag);
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
  const bool widen = a.dtype() == kBFloat16 && !onednn_runs_bf16();
  c.widened = widen;
  if (bias.defined() && (bias.dtype() != a.dtype() || bias.stride(0) != 1)) return false;
  if (!out.is_contiguous() || !side_of(a, ta, c.a) || !side_of(b, tb, c.b)) return false;
  c.batch = out.dim() == 3 ? out.size(0) : 1;
  c.m = c.a.rows, c.n = c.b.cols, c.k = c.a.cols;
  if (c.batch == 0 || c.m == 0 || c.n == 0 || c.k == 0) return false;
  const int64_t min_macs = a.dtype() == kBFloat16 ? kOneDnnGemmMinMacsBf16 : kOneDnnGemmMinMacsFp32;
  if (mode == OneDnnMode::Sized && c.batch * c.m * c.n * c.k < min_macs) return false;
  // Widened, the primitives read the packed fp32 copies.
  if (widen) c.a_in = c.a, c.b_in = c.b, c.a = packed(c.a), c.b = packed(c.b);
  c.parts = cut(c);
  const std::function<std::string()> operands = [&] { return gemm_operands(a, ta, b, tb, bias, epilogue); };
  for (const Part& part : c.parts) {
    c.plans.push_back(plan_part(c, part, dt, widen, bias.defined(), epilogue, operands));
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
  // Element sizes of what the primitives read (a, b) and of the output tensor.
  const int64_t es_out = static_cast<int64_t>(element_size(a.dtype())), es = c.widened ? 4 : es_out;
  const char* pa = static_cast<const char*>(a.raw_data());
  const char* pb = static_cast<const char*>(b.raw_data());
  const char* pbias = bias.defined() ? static_cast<const char*>(bias.raw_data()) : nullptr;
  // Widened (bf16 on fp32 primitives): the operands and the bias as fp32, once for the call, on
  // this thread (the parts only read them).
  if (c.widened) {
    pa = widened(pa, c.a_in, c.batch, onednn::Slot::WideX);
    pb = widened(pb, c.b_in, c.batch, onednn::Slot::WideWeights);
    if (pbias) pbias = reinterpret_cast<const char*>(onednn::widen(pbias, bias.numel(), onednn::Slot::WideBias));
  }
  char* pout = static_cast<char*>(out.raw_data());
  onednn::run_parts(
      static_cast<int>(c.parts.size()), "gemm", [&] { return gemm_operands(a, ta, b, tb, bias, epilogue); },
      [&](int p) {
        const Part& part = c.parts[static_cast<size_t>(p)];
        const GemmPlan& plan = *c.plans[static_cast<size_t>(p)];
        const void* ap = pa + ((c.a.batched ? part.batch0 * c.a.bs : 0) + part.row0 * c.a.rs) * es;
        const void* bp = pb + (c.b.batched ? part.batch0 * c.b.bs : 0) * es;
        if (plan.copies_a) {
          void* dense = onednn::thread_buffer(onednn::Slot::Source, plan.a.get_size());
          onednn::run_reorder(plan.a_copy, ap, dense);
          ap = dense;
        }
        if (plan.copies_b) {
          void* dense = onednn::thread_buffer(onednn::Slot::Weights, plan.b.get_size());
          onednn::run_reorder(plan.b_copy, bp, dense);
          bp = dense;
        }
        char* dst = pout + (part.batch0 * c.m + part.row0) * c.n * es_out;
        void* result = c.widened ? onednn::thread_buffer(onednn::Slot::Destination, plan.out.get_size()) : dst;
        std::unordered_map<int, memory> args{{DNNL_ARG_SRC, onednn::wrap(plan.a, ap)},
                                             {DNNL_ARG_WEIGHTS, onednn::wrap(plan.b, bp)},
                                             {DNNL_ARG_DST, onednn::wrap(plan.out, result)}};
        if (pbias) args.emplace(DNNL_ARG_BIAS, onednn::wrap(plan.bias, pbias));
        onednn::execute(plan.prim, plan.scratchpad, std::move(args));
        if (c.widened) onednn::narrow(static_cast<const float*>(result), dst, part.batches * part.rows * c.n);
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
