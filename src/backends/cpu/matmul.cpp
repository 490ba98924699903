// Matrix products: oneDNN's matmul where it takes the call (onednn/onednn.h: fp32 and bf16 above a
// size threshold), else Eigen (gemm_eigen.h: the copy built for this CPU's vector unit). On the
// own path half inputs are widened to fp32 blocks, multiplied in fp32 and the result rounded once:
// Eigen's own half GEMM is hundreds of times slower, and this is exactly the tensor-core contract
// (fp32 accumulation, one rounding). bf16 inputs go to the vdpbf16ps kernel (gemm_bf16.h) where
// the CPU has one: same contract, no widening of the operands, twice the fp32 rate.
#include <algorithm>
#include <string>
#include <type_traits>

#include "backends/cpu/cpu_backend.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/gemm_eigen.h"
#include "backends/cpu/loops.h"
#include "backends/cpu/onednn/onednn.h"
#include "backends/cpu/verbose.h"
#include "backends/matmul.h"
#include "mixtrain/base/grad_mode.h"

namespace mixtrain::backends::cpu {

namespace {

// One operand as a [rows, cols] matrix after its optional transpose.
struct MatrixView {
  const char* data;
  int64_t rows, cols;
  int64_t row_stride, col_stride;  // elements
  int64_t batch_stride;            // elements; 0 when broadcast over the batch
};

MatrixView view_of(const Tensor& t, bool trans) {
  const int64_t d = t.dim();
  MatrixView v{static_cast<const char*>(t.raw_data()), t.size(d - 2), t.size(d - 1), t.stride(d - 2), t.stride(d - 1),
               d == 3 ? t.stride(0) : 0};
  if (trans) {
    std::swap(v.rows, v.cols);
    std::swap(v.row_stride, v.col_stride);
  }
  MT_CHECK(v.col_stride == 1 || v.row_stride == 1 || v.rows == 1 || v.cols == 1,
           "gemm: operand ", t.summary(), " needs a unit stride in one of its last two dimensions");
  return v;
}

template <class S>
GemmMatrix<S> matrix_at(const MatrixView& v, int64_t bi) {
  return {reinterpret_cast<const S*>(v.data) + bi * v.batch_stride, v.rows, v.cols, v.row_stride, v.col_stride};
}

// Bias and activation in one sweep over a freshly written [m, n] product. The flags are template
// parameters so each combination is a branch-free loop the compiler vectorizes.
template <bool kBias, bool kRelu, class S>
void epilogue_rows(S* out, int64_t m, int64_t n, const S* bias) {
  parallel_for(m, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(n, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      S* row = out + r * n;
      for (int64_t j = 0; j < n; ++j) {
        S v = row[j];
        if constexpr (kBias) v += bias[j];
        if constexpr (kRelu) v = relu_value(v);
        row[j] = v;
      }
    }
  });
}

template <class S>
void apply_epilogue(S* out, int64_t m, int64_t n, const S* bias, GemmEpilogue epilogue) {
  const bool relu = epilogue == GemmEpilogue::Relu;
  if (bias && relu) epilogue_rows<true, true>(out, m, n, bias);
  else if (bias) epilogue_rows<true, false>(out, m, n, bias);
  else if (relu) epilogue_rows<false, true>(out, m, n, bias);
}

// In: the operands' element type, S itself or bf16 bits (uint16_t) for the bf16 kernel.
template <class S, class In = S>
void gemm_typed(const MatrixView& a, const MatrixView& b, S* out, int64_t batch, const S* bias,
                GemmEpilogue epilogue) {
  const int64_t m = a.rows, n = b.cols;
  auto one = [&](int64_t bi) {
    if constexpr (std::is_same_v<In, S>)
      gemm_product(GemmCall<S>{matrix_at<S>(a, bi), matrix_at<S>(b, bi), out + bi * m * n, n, false});
    else
      gemm_bf16_product(GemmBf16Call<In>{matrix_at<In>(a, bi), matrix_at<In>(b, bi), out + bi * m * n, n, false});
  };
  if (batch > 1) {
    // Batched products are small: parallelize across the batch, Eigen runs single-threaded inside.
    parallel_for(batch, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t bi = b0; bi < b1; ++bi) one(bi);
    });
  } else {
    one(0);
  }
  // After the batch loop, not inside it: its parallel region would serialize this sweep.
  apply_epilogue(out, batch * m, n, bias, epilogue);
}

// The backend's own kernels; returns the name of the one that ran, for the trace.
std::string own_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& out,
                     const Tensor& bias, GemmEpilogue epilogue) {
  const int64_t batch = out.dim() == 3 ? out.size(0) : 1;
  if (a.dtype() == kFloat32 || a.dtype() == kFloat64) {
    const MatrixView va = view_of(a, trans_a), vb = view_of(b, trans_b);
    if (a.dtype() == kFloat32)
      gemm_typed<float>(va, vb, out.data_ptr<float>(), batch, bias.defined() ? bias.data_ptr<float>() : nullptr,
                        epilogue);
    else
      gemm_typed<double>(va, vb, out.data_ptr<double>(), batch, bias.defined() ? bias.data_ptr<double>() : nullptr,
                         epilogue);
    return std::string("eigen:") + gemm_isa();
  }
  MT_CHECK(is_half(a.dtype()), "gemm: not implemented for dtype ", a.dtype());
  auto widen = [&](const Tensor& t) {
    NoGradGuard no_grad;
    // A transposed operand (a backward's a^T or b^T) is widened as its contiguous transpose, one
    // bulk conversion instead of a strided one, and handed on as a transposed view.
    const Tensor tt = t.dim() >= 2 && !t.is_contiguous() ? t.transpose(t.dim() - 2, t.dim() - 1) : Tensor();
    const bool transposed = tt.defined() && tt.is_contiguous();
    const Tensor& src = transposed ? tt : t;
    Tensor w = Tensor::empty(src.shape(), TensorOptions(kFloat32));
    copy(DeviceType::CPU, src, w);
    return transposed ? w.transpose(t.dim() - 2, t.dim() - 1) : w;
  };
  // The scratch is allocated in the order a dry run records it (workspace.cpp).
  if (a.dtype() == kBFloat16 && b.dtype() == kBFloat16 && bf16_gemm_enabled()) {
    const Tensor bias32 = bias.defined() ? widen(bias) : Tensor();
    Tensor out32 = Tensor::empty(out.shape(), TensorOptions(kFloat32));
    gemm_typed<float, uint16_t>(view_of(a, trans_a), view_of(b, trans_b), out32.data_ptr<float>(), batch,
                                bias32.defined() ? bias32.data_ptr<float>() : nullptr, epilogue);
    copy(DeviceType::CPU, out32, out);
    return "own:avx512bf16";
  }
  const Tensor a32 = widen(a), b32 = widen(b);
  const Tensor bias32 = bias.defined() ? widen(bias) : Tensor();
  Tensor out32 = Tensor::empty(out.shape(), TensorOptions(kFloat32));
  gemm_typed<float>(view_of(a32, trans_a), view_of(b32, trans_b), out32.data_ptr<float>(), batch,
                    bias32.defined() ? bias32.data_ptr<float>() : nullptr, epilogue);
  copy(DeviceType::CPU, out32, out);
  return std::string("eigen:") + gemm_isa() + " (widened to fp32)";
}

}  // namespace

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& out, const Tensor& bias,
          GemmEpilogue epilogue) {
  const CallTrace trace("gemm");
  MT_CHECK(out.is_contiguous(), "gemm: output must be contiguous");
  std::string impl;
  if (!onednn_gemm(a, trans_a, b, trans_b, out, bias, epilogue, impl))
    impl = own_gemm(a, trans_a, b, trans_b, out, bias, epilogue);
  trace.done(impl, [&] { return gemm_operands(a, trans_a, b, trans_b, bias, epilogue); });
}

void register_matmul() {
  backends::gemm.set(DeviceType::CPU, gemm);
}

}  // namespace mixtrain::backends::cpu
