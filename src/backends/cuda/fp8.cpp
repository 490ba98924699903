// The fp8 family on CUDA (backends/fp8.h): the casts and the scale update on our kernels
// (kernels/fp8.cu), scaled_mm on cuBLASLt's fp8 GEMM (compute capability 8.9 and later).
//
// cuBLASLt's fp8 GEMM takes only the "TN" layout: in its column-major terms A transposed and B
// not. As in matmul.cpp, out = a.b is computed as out^T = b^T.a^T, so cuBLAS's A is our b, read
// with op T: b must be column-major (b^T [n, k] contiguous), and cuBLAS's B is our a with op N:
// a must be row-major ([m, k] contiguous). An operand in the other layout (a backward's g^T, the
// weight for the input gradient) is copied into this one first. A's scale is therefore scale_b.
#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "backends/copy.h"
#include "backends/elementwise.h"
#include "backends/fp8.h"
#include "backends/cuda/context.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/lt_types.h"
#include "backends/cuda/operands.h"
#include "kernels/cuda/fp8.h"

namespace mixtrain::backends::cuda {

namespace {

void cast_to_fp8(const Tensor& src, const Tensor& dst, DType fp8, const Tensor& scale, bool saturate,
                 const Tensor& amax, const Tensor& saturated) {
  check_device("cast_to_fp8", src.device(), {&src, &dst, &scale, &amax, &saturated});
  MT_CHECK(src.is_contiguous() && (!dst.defined() || (dst.is_contiguous() && dst.dtype() == fp8)),
           "cast_to_fp8: expected contiguous operands, got ", src.summary(), " -> ",
           dst.defined() ? dst.summary() : std::string("(statistics only)"));
  kernels::cast_to_fp8(src.dtype(), src.raw_data(), ptr(dst), src.numel(), fp8,
                       scale.defined() ? scale.data_ptr<float>() : nullptr, saturate,
                       amax.defined() ? amax.data_ptr<float>() : nullptr,
                       saturated.defined() ? saturated.data_ptr<int64_t>() : nullptr, context(src).stream);
}

void fp8_update_scale(const Tensor& history, const Tensor& scale, const Tensor& scale_inv, const Fp8ScaleArgs& args) {
  check_device("fp8_update_scale", history.device(), {&history, &scale, &scale_inv});
  MT_CHECK(history.is_contiguous() && scale.is_contiguous() && scale_inv.is_contiguous() &&
               scale.numel() == history.size(1) && scale_inv.numel() == history.size(1),
           "fp8_update_scale: history ", history.summary(), " does not match scale ", scale.summary());
  kernels::fp8_update_scale(history.data_ptr<float>(), history.size(0), history.size(1), scale.data_ptr<float>(),
                            scale_inv.data_ptr<float>(), args, context(history).stream);
}

// Alignments as the plan key records them: at most 16 bytes (as matmul.cpp promises them).
int alignment(const void* p) { return std::min(pointer_alignment(p), 16); }

struct Fp8Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

// a, b, out and bias dtypes (bias: -1 when none), m, n, k, device, the four pointers' alignments.
using Fp8PlanKey = std::tuple<int, int, int, int, int64_t, int64_t, int64_t, int, int, int, int, int>;

using Fp8PlanCache = LtPlanCache<Fp8PlanKey, Fp8Plan>;

cublasLtMatrixLayout_t layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t l = nullptr;
  MT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
  return l;
}

void destroy(Fp8Plan& p) {
  if (p.desc) MT_CUBLAS_CHECK(cublasLtMatmulDescDestroy(p.desc));
  for (cublasLtMatrixLayout_t l : {p.a, p.b, p.c, p.d})
    if (l) MT_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(l));
}

// Descriptors for out^T [n, m] = (b^T)^T-read [k, n] op T x a^T [k, m] op N, with the bias epilogue
// when there is one, and the heuristic's best algorithm; an Error naming the call when it has none.
Fp8Plan build_plan(DeviceContext& ctx, const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out,
                   int64_t m, int64_t n, int64_t k, const int (&align)[4]) {
  Fp8Plan p;
  try {
    MT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    // Full fp32 accumulation (PyTorch's use_fast_accum=False): Hopper's fast mode sums in less.
    const int8_t fast_accum = 0;
    MT_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum, sizeof(fast_accum)));
    if (bias.defined()) {
      const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      const cudaDataType_t bias_type = lt_data_type(bias.dtype(), "scaled_mm");
      MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
      MT_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
      const void* bias_ptr = bias.raw_data();  // the heuristic judges its alignment from it
      MT_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)));
    }
    p.a = layout(lt_data_type(b.dtype(), "scaled_mm"), k, n, k);
    p.b = layout(lt_data_type(a.dtype(), "scaled_mm"), k, m, k);
    // C is never read (beta 0) but must be a type cuBLASLt's fp8 table pairs with D: D's own (an
    // fp32 output with a bf16 bias takes an fp32 C; a bf16 C was refused on an H200, 2026-11-28).
    p.c = layout(lt_data_type(out.dtype(), "scaled_mm"), n, m, n);
    p.d = layout(lt_data_type(out.dtype(), "scaled_mm"), n, m, n);
    cublasLtMatmulPreference_t pref = nullptr;
    MT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = ctx.gemm_workspace_bytes;
    const cublasLtMatmulPreferenceAttributes_t align_attrs[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; ++i) {
      const uint32_t al = static_cast<uint32_t>(align[i]);
      st = cublasLtMatmulPreferenceSetAttribute(pref, align_attrs[i], &al, sizeof(al));
    }
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulAlgoGetHeuristic(ctx.lt, p.desc, p.a, p.b, p.c, p.d, pref, 1, &result, &found);
    MT_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    MT_CHECK(st == CUBLAS_STATUS_SUCCESS && found > 0, "scaled_mm: cuBLASLt has no fp8 algorithm for ", a.dtype(),
             " [", m, ", ", k, "] x ", b.dtype(), " [", k, ", ", n, "] -> ", out.dtype(),
             bias.defined() ? " with a bias" : "", " on ", ctx.props.name, ": cublasLtMatmulAlgoGetHeuristic gave ",
             cublasLtGetStatusName(st), found == 0 && st == CUBLAS_STATUS_SUCCESS ? " and no algorithm" : "");
    p.algo = result.algo;
  } catch (...) {
    destroy(p);
    throw;
  }
  return p;
}

void set_pointer(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* value) {
  MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

void scaled_mm(const Tensor& a_in, const Tensor& b_in, const Tensor& scale_a, const Tensor& scale_b, const Tensor& bias,
               const Tensor& out) {
  check_device("scaled_mm", out.device(), {&a_in, &b_in, &scale_a, &scale_b, &bias});
  DeviceContext& ctx = context(out);
  const int cc = ctx.props.major * 10 + ctx.props.minor;
  MT_CHECK(cc >= 89, "scaled_mm: cuBLASLt's fp8 GEMM needs a GPU of compute capability 8.9 or later (Ada, Hopper, ",
           "Blackwell); ", ctx.props.name, " is ", ctx.props.major, ".", ctx.props.minor,
           " (run FP8 on the CPU, or train in bf16 there)");
  const int64_t m = a_in.size(0), k = a_in.size(1), n = b_in.size(1);
  MT_CHECK(out.is_contiguous() && out.size(0) == m && out.size(1) == n, "scaled_mm: output ", out.summary(),
           " must be a contiguous [", m, ", ", n, "]");
  MT_CHECK(k % 16 == 0 && n % 16 == 0, "scaled_mm: cuBLASLt's fp8 GEMM needs k and n multiples of 16, got ",
           a_in.dtype(), " [", m, ", ", k, "] x ", b_in.dtype(), " [", k, ", ", n, "]",
           " (amp::Fp8Scaling's default filter keeps such layers out of FP8)");
  if (m == 0 || n == 0) return;
  const Tensor bias_c = as_contiguous(bias, bias.defined() ? bias.dtype() : DType::BFloat16);
  if (k == 0) {  // an empty sum: zeros, plus the bias
    backends::fill(DeviceType::CUDA, out, 0.0);
    if (bias.defined()) backends::binary(DeviceType::CUDA, BinaryOp::Add, out, bias_c.to(out.dtype()).expand(out.shape()), out);
    return;
  }
  // The TN layout: a row-major, b column-major (b^T row-major); copies where they are not.
  const Tensor a = a_in.stride(1) == 1 && a_in.stride(0) == k ? a_in : as_contiguous(a_in, a_in.dtype());
  const Tensor bt_in = b_in.t();
  const Tensor bt = bt_in.stride(1) == 1 && bt_in.stride(0) == k ? bt_in : as_contiguous(bt_in, b_in.dtype());
  const int align[4] = {alignment(bt.raw_data()), alignment(a.raw_data()), alignment(out.raw_data()),
                        alignment(out.raw_data())};
  const Fp8PlanKey key{static_cast<int>(a.dtype()), static_cast<int>(bt.dtype()), static_cast<int>(out.dtype()),
                       bias.defined() ? static_cast<int>(bias.dtype()) : -1, m, n, k, ctx.index, align[0], align[1],
                       align[2], bias.defined() ? alignment(bias_c.raw_data()) : 0};
  Fp8PlanCache& cache = Fp8PlanCache::instance();
  // Held through the launch: the pointers are attributes of the shared descriptor.
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto it = cache.plans.find(key);
  if (it == cache.plans.end()) it = cache.plans.emplace(key, build_plan(ctx, a, b_in, bias_c, out, m, n, k, align)).first;
  const Fp8Plan& plan = it->second;
  // A scale that is one element of a layer's scale vector (fp8_linear's slots) sits 4 or 8 bytes
  // into it, and cuBLASLt refused such a pointer at launch (CUBLAS_STATUS_NOT_SUPPORTED, H200,
  // 2026-11-28): a 16-byte-aligned copy of the one float instead.
  auto aligned = [&](const Tensor& scale) { return alignment(scale.raw_data()) >= 16 ? scale : scale.clone(); };
  const Tensor sa = aligned(scale_a), sb = aligned(scale_b);
  set_pointer(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, sb.raw_data());  // cuBLAS's A is our b
  set_pointer(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, sa.raw_data());
  if (bias.defined()) set_pointer(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_c.raw_data());
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t st = cublasLtMatmul(ctx.lt, plan.desc, &alpha, bt.raw_data(), plan.a, a.raw_data(), plan.b,
                                           &beta, out.raw_data(), plan.c, out.raw_data(), plan.d, &plan.algo,
                                           ctx.gemm_workspace, ctx.gemm_workspace_bytes, ctx.stream);
  MT_CHECK(st == CUBLAS_STATUS_SUCCESS, "scaled_mm: cublasLtMatmul failed with ", cublasLtGetStatusName(st), " for ",
           a.dtype(), " [", m, ", ", k, "] x ", b_in.dtype(), " [", k, ", ", n, "] -> ", out.dtype(),
           bias.defined() ? std::string(" with a ") + dtype_name(bias.dtype()) + " bias" : std::string(),
           " on ", ctx.props.name, " (alignments of b^T, a, out, bias: ", align[0], ", ", align[1], ", ", align[2],
           ", ", bias.defined() ? alignment(bias_c.raw_data()) : 0, " bytes; workspace ", ctx.gemm_workspace_bytes,
           " bytes at ", ctx.gemm_workspace, ")");
}

}  // namespace

void register_fp8() {
  backends::cast_to_fp8.set(DeviceType::CUDA, cast_to_fp8);
  backends::fp8_update_scale.set(DeviceType::CUDA, fp8_update_scale);
  backends::scaled_mm.set(DeviceType::CUDA, scaled_mm);
}

}  // namespace mixtrain::backends::cuda
