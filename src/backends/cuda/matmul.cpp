// Matrix products through cuBLASLt: fp16/bf16 on tensor cores with fp32 accumulation, fp32 in
// strict fp32 unless mixtrain::cuda::set_allow_tf32(true), fp64 in fp64; strided batches; the
// bias and ReLU folded into the GEMM's epilogue. A plan (descriptors and an algorithm) is built
// once per shape, layout and epilogue and cached; the algorithm is the fastest of the heuristic's
// candidates, timed on first use (gemm_tuning.h).
//
// Our tensors are row-major, cuBLAS is column-major: out = A.B is computed as out^T = B^T.A^T,
// and a row-major operand is its own transpose read column-major, so no data moves.
#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>
#include <vector>

#include "backends/copy.h"
#include "backends/elementwise.h"
#include "backends/matmul.h"
#include "backends/cuda/context.h"
#include "backends/cuda/operands.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/gemm_tuning.h"
#include "backends/cuda/lt_types.h"

namespace mixtrain::backends::cuda {

namespace {

// One operand as cuBLAS sees it: a column-major stored matrix, the op applied to it, its ld.
struct Operand {
  const Tensor* t;
  cublasOperation_t op;
  int64_t rows, cols, ld;  // of the stored (column-major) matrix
  int64_t batch_stride;
};

// The logical matrix M = trans ? t^T : t (last two dims) presented as cuBLAS operand X = M^T.
// Returns false when its strides fit neither layout (the caller copies it contiguous).
bool as_transposed_operand(const Tensor& t, bool trans, Operand& o) {
  const int64_t d = t.dim();
  int64_t r = t.size(d - 2), c = t.size(d - 1), sr = t.stride(d - 2), sc = t.stride(d - 1);
  if (trans) std::swap(r, c), std::swap(sr, sc);
  o.t = &t;
  o.batch_stride = d == 3 ? t.stride(0) : 0;
  const bool row_major = sc == 1 || (c == 1 && sr != 1);
  if (row_major) {  // storage is M^T column-major: cuBLAS reads X = M^T with op N
    o.op = CUBLAS_OP_N;
    o.rows = c, o.cols = r;
    o.ld = r == 1 ? std::max<int64_t>(c, 1) : sr;
    return o.ld >= std::max<int64_t>(o.rows, 1);
  }
  if (sr == 1) {  // storage is M column-major: X = M^T is op T of it
    o.op = CUBLAS_OP_T;
    o.rows = r, o.cols = c;
    o.ld = c == 1 ? std::max<int64_t>(r, 1) : sc;
    return o.ld >= std::max<int64_t>(o.rows, 1);
  }
  return false;
}

using PlanKey = std::tuple<int, int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                           int64_t, int, int, int, int, int>;

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool fused_epilogue = false;  // the GEMM itself adds the bias and applies the activation
};

// cuBLASLt's epilogue for a bias and our activation. Its RELU is max(x, 0), ours x <= 0 ? 0 : x:
// the same for every number; a NaN pre-activation may come out as 0 (a known cuBLASLt behaviour,
// accepted: the fused pass is the point, and an overflow still reaches the gradients).
cublasLtEpilogue_t lt_epilogue(bool bias, GemmEpilogue epilogue) {
  if (epilogue == GemmEpilogue::Relu) return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
  return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

using PlanCache = LtPlanCache<PlanKey, Plan>;

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                                   int64_t batch_stride) {
  cublasLtMatrixLayout_t l = nullptr;
  MT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    MT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    MT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_stride,
                                                     sizeof(batch_stride)));
  }
  return l;
}

bool epilogue_reads_bias(cublasLtEpilogue_t epi) {
  return epi == CUBLASLT_EPILOGUE_BIAS || epi == CUBLASLT_EPILOGUE_RELU_BIAS;
}

void set_bias_pointer(cublasLtMatmulDesc_t desc, const void* bias) {
  MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
}

void destroy_plan(Plan& plan) {
  MT_CUBLAS_CHECK(cublasLtMatmulDescDestroy(plan.desc));
  MT_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(plan.a));
  MT_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(plan.b));
  MT_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(plan.c));
}

// Builds the descriptors and asks the heuristic for its candidate algorithms with epilogue `epi`
// (best first; plan.algo is the first). Returns the heuristic's status, NOT_SUPPORTED when it found
// no algorithm; the plan and candidates are only valid on SUCCESS. The heuristic judges the bias's alignment from its pointer, so the real one is
// set before it runs (and the bias's alignment is part of the plan key).
cublasStatus_t build_plan(DeviceContext& ctx, DType dt, const Operand& x, const Operand& y, int64_t m, int64_t n,
                          int64_t k, int64_t batch, cublasLtEpilogue_t epi, const void* bias, const int (&align)[4],
                          Plan& plan, std::vector<cublasLtMatmulHeuristicResult_t>& candidates) {
  // First, since it may throw (a bad MIXTRAIN_GEMM_TUNING) before anything needs destroying.
  candidates.assign(static_cast<size_t>(gemm_candidate_count(ctx)), cublasLtMatmulHeuristicResult_t{});
  const cudaDataType_t type = lt_data_type(dt, "gemm");
  const bool fp64 = dt == DType::Float64;
  const cublasComputeType_t compute =
      fp64 ? CUBLAS_COMPUTE_64F
           : (dt == DType::Float32 && mixtrain::cuda::allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F);
  MT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, compute, fp64 ? CUDA_R_64F : CUDA_R_32F));
  MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &x.op, sizeof(x.op)));
  MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &y.op, sizeof(y.op)));
  if (epi != CUBLASLT_EPILOGUE_DEFAULT)
    MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (epilogue_reads_bias(epi)) set_bias_pointer(plan.desc, bias);
  plan.fused_epilogue = epi != CUBLASLT_EPILOGUE_DEFAULT;
  plan.a = make_layout(type, x.rows, x.cols, x.ld, batch, x.batch_stride);
  plan.b = make_layout(type, y.rows, y.cols, y.ld, batch, y.batch_stride);
  plan.c = make_layout(type, n, m, n, batch, m * n);
  cublasLtMatmulPreference_t pref = nullptr;
  MT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = ctx.gemm_workspace_bytes;
  MT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const cublasLtMatmulPreferenceAttributes_t align_attrs[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  // Promised as the plan key records them (at most 16 bytes, as PyTorch does): the plan is reused
  // for every call with that key, whose pointers may be aligned to 16 bytes only.
  for (int i = 0; i < 4; ++i) {
    const uint32_t a = static_cast<uint32_t>(std::min(align[i], 16));
    MT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, align_attrs[i], &a, sizeof(a)));
  }
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ctx.lt, plan.desc, plan.a, plan.b, plan.c, plan.c, pref,
                                                           static_cast<int>(candidates.size()), candidates.data(), &found);
  MT_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    destroy_plan(plan);
    return st != CUBLAS_STATUS_SUCCESS ? st : CUBLAS_STATUS_NOT_SUPPORTED;
  }
  candidates.resize(static_cast<size_t>(found));
  plan.algo = candidates[0].algo;
  return CUBLAS_STATUS_SUCCESS;
}

// The plan key as text, for the tuning table: every field but the device index (a table is per
// device model), comma-separated.
std::string key_text(const PlanKey& key) {
  std::ostringstream os;
  int i = 0;
  std::apply([&](const auto&... field) { ((os << (i == 0 ? "" : ",") << (i == 11 ? -1 : field), ++i), ...); }, key);
  return os.str();
}

// One cublasLtMatmul of `plan` with `algo`: out^T = b^T . a^T in cuBLAS's terms (see gemm).
cublasStatus_t launch(DeviceContext& ctx, const Plan& plan, const cublasLtMatmulAlgo_t& algo, DType dt, const Tensor& a,
                      const Tensor& b, const Tensor& out) {
  const double alpha64 = 1.0, beta64 = 0.0;
  const float alpha32 = 1.0f, beta32 = 0.0f;
  const bool fp64 = dt == DType::Float64;
  return cublasLtMatmul(ctx.lt, plan.desc, fp64 ? static_cast<const void*>(&alpha64) : &alpha32, b.raw_data(), plan.a,
                        a.raw_data(), plan.b, fp64 ? static_cast<const void*>(&beta64) : &beta32, out.raw_data(),
                        plan.c, out.raw_data(), plan.c, &algo, ctx.gemm_workspace, ctx.gemm_workspace_bytes,
                        ctx.stream);
}

}  // namespace

void gemm(const Tensor& a_in, bool trans_a, const Tensor& b_in, bool trans_b, const Tensor& out,
                       const Tensor& bias, GemmEpilogue epilogue) {
  check_device("gemm", out.device(), {&a_in, &b_in, &bias});
  MT_CHECK(out.is_contiguous(), "gemm: output must be contiguous");
  DeviceContext& ctx = context(out);
  const DType dt = out.dtype();
  const int64_t batch = out.dim() == 3 ? out.size(0) : 1;
  const int64_t m = out.size(-2), n = out.size(-1);
  // cuBLAS A = (op b)^T (n x k), cuBLAS B = (op a)^T (k x m); D = out^T (n x m, ld n).
  Tensor a = a_in, b = b_in;
  Operand x{}, y{};
  if (!as_transposed_operand(b, trans_b, x)) {
    b = as_contiguous(b, dt);
    as_transposed_operand(b, trans_b, x);
  }
  if (!as_transposed_operand(a, trans_a, y)) {
    a = as_contiguous(a, dt);
    as_transposed_operand(a, trans_a, y);
  }
  const int64_t k = x.op == CUBLAS_OP_N ? x.cols : x.rows;
  if (m * n == 0) return;
  const Tensor bias_c = as_contiguous(bias, dt);
  // What a plan without the fused epilogue leaves to elementwise passes: the bias, then the
  // activation, in place.
  auto unfused_epilogue = [&] {
    if (bias.defined()) backends::binary(DeviceType::CUDA, BinaryOp::Add, out, bias_c.expand(out.shape()), out);
    if (epilogue == GemmEpilogue::Relu) backends::unary(DeviceType::CUDA, UnaryOp::Relu, out, out, 0.0);
  };
  if (k == 0) {  // an empty sum: zeros, then the epilogue
    backends::fill(DeviceType::CUDA, out, 0.0);
    unfused_epilogue();
    return;
  }

  const int align[4] = {pointer_alignment(b.raw_data()), pointer_alignment(a.raw_data()),
                        pointer_alignment(out.raw_data()), pointer_alignment(out.raw_data())};
  const bool tf32 = dt == DType::Float32 && mixtrain::cuda::allow_tf32();
  PlanKey key{static_cast<int>(dt), static_cast<int>(x.op), static_cast<int>(y.op), m, n, k, batch, x.ld, y.ld,
              x.batch_stride, y.batch_stride, ctx.index,
              bias.defined() ? std::min(pointer_alignment(bias_c.raw_data()), 16) : 0, static_cast<int>(epilogue),
              tf32 ? 1 : 0, std::min(align[0], 16), std::min(align[1], 16), std::min(align[2], 16)};
  // Held through the launch: the bias pointer is an attribute of the shared descriptor.
  PlanCache& cache = PlanCache::instance();
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto it = cache.plans.find(key);
  if (it == cache.plans.end()) {
    Plan p;
    std::vector<cublasLtMatmulHeuristicResult_t> candidates;
    const cublasLtEpilogue_t epi = lt_epilogue(bias.defined(), epilogue);
    const void* bias_ptr = bias.defined() ? bias_c.raw_data() : nullptr;
    cublasStatus_t st = build_plan(ctx, dt, x, y, m, n, k, batch, epi, bias_ptr, align, p, candidates);
    // No algorithm with the fused epilogue for this case (e.g. fp64): plain product, then
    // unfused_epilogue.
    if (st != CUBLAS_STATUS_SUCCESS && epi != CUBLASLT_EPILOGUE_DEFAULT)
      st = build_plan(ctx, dt, x, y, m, n, k, batch, CUBLASLT_EPILOGUE_DEFAULT, nullptr, align, p, candidates);
    MT_CHECK(st == CUBLAS_STATUS_SUCCESS, "gemm: cuBLASLt has no algorithm for ", dt, " [", m, ", ", k, "] x [", k,
             ", ", n, "] (batch ", batch, "): cublasLtMatmulAlgoGetHeuristic gave ", cublasLtGetStatusName(st));
    // Timing writes this call's output (beta is 0, so every launch overwrites it whole); the
    // launch below writes it once more.
    int chosen = 0;
    try {
      chosen = choose_gemm_algorithm(ctx, key_text(key), candidates, [&](const cublasLtMatmulAlgo_t& algo) {
        return launch(ctx, p, algo, dt, a, b, out);
      });
    } catch (...) {  // an event or tuning-file error: the plan is not cached, so nothing else frees it
      destroy_plan(p);
      throw;
    }
    p.algo = candidates[static_cast<size_t>(chosen)].algo;
    it = cache.plans.emplace(key, p).first;
  }
  const Plan& plan = it->second;
  if (plan.fused_epilogue && bias.defined()) set_bias_pointer(plan.desc, bias_c.raw_data());
  MT_CUBLAS_CHECK(launch(ctx, plan, plan.algo, dt, a, b, out));
  if (!plan.fused_epilogue) unfused_epilogue();
}

void register_matmul() {
  backends::gemm.set(DeviceType::CUDA, gemm);
}

}  // namespace mixtrain::backends::cuda
