#pragma once
// Building blocks of the CPU kernels: dtype dispatch (the shared one, with the CPU half types) and
// a strided N-ary elementwise loop that coalesces dimensions, runs the contiguous case as a plain
// vectorizable loop and splits large work across OpenMP threads (as many as threads.h allows).
#include <algorithm>
#include <array>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <omp.h>

#include "kernels/cpu/lane_sum.h"
#include "backends/cpu/threads.h"
#include "backends/dtype_dispatch.h"
#include "backends/elementwise_math.h"
#include "mixtrain/base/dtype_traits.h"
#include "mixtrain/base/error.h"
#include "mixtrain/core/tensor.h"

namespace mixtrain::backends::cpu {

using backends::Tag;

// Calls f(Tag<T>{}) for the floating dtypes (backends/dtype_dispatch.h).
template <class F>
void dispatch_floating(DType dtype, const char* op, F&& f) {
  dispatch_floating_types<Half, BFloat16>(dtype, op, "CPU", std::forward<F>(f));
}

// Calls f(Tag<T>{}) for every dtype but fp8.
template <class F>
void dispatch_all(DType dtype, const char* op, F&& f) {
  dispatch_all_types<Half, BFloat16>(dtype, op, "CPU", std::forward<F>(f));
}

// Calls f(Tag<T>{}) for every dtype, fp8 included (copy, fill).
template <class F>
void dispatch_all_and_float8(DType dtype, const char* op, F&& f) {
  dispatch_all_and_float8_types<Half, BFloat16>(dtype, op, "CPU", std::forward<F>(f));
}

// Elements below which a loop stays on one thread. 8192 measured best on 2 cores (the small
// transformer's activations are 16K elements: 32768 left them serial, 2048 gained nothing more).
constexpr int64_t kParallelGrain = 8192;

// Iterates the elements of `shape` for N operands given their byte strides. `inner(ptrs, n,
// strides)` is called for runs along the innermost coalesced dimension.
template <int N, class Inner>
void strided_loop(const Shape& shape, std::array<char*, N> base, std::array<const int64_t*, N> elem_strides,
                  std::array<int64_t, N> elem_sizes, Inner&& inner) {
  // Coalesce adjacent dims that are contiguous with each other for every operand.
  const int nd_in = static_cast<int>(shape.size());
  MT_CHECK(nd_in <= 16, "elementwise: tensors of more than 16 dimensions are not supported");
  int64_t sizes[16];
  int64_t strides[N][16];
  int nd = 0;
  const Shape out_strides(elem_strides[0], elem_strides[0] + nd_in);
  for (int d : dims_in_memory_order(shape, out_strides)) {
    if (shape[d] == 1) continue;
    bool merge = nd > 0;
    for (int k = 0; k < N && merge; ++k) merge = strides[k][nd - 1] == elem_strides[k][d] * shape[d];
    if (merge) {
      sizes[nd - 1] *= shape[d];
      for (int k = 0; k < N; ++k) strides[k][nd - 1] = elem_strides[k][d];
    } else {
      sizes[nd] = shape[d];
      for (int k = 0; k < N; ++k) strides[k][nd] = elem_strides[k][d];
      ++nd;
    }
  }
  if (nd == 0) {
    sizes[0] = 1;
    for (int k = 0; k < N; ++k) strides[k][0] = 0;
    nd = 1;
  }
  for (int k = 0; k < N; ++k)
    for (int d = 0; d < nd; ++d) strides[k][d] *= elem_sizes[k];

  int64_t total = 1;
  for (int d = 0; d < nd; ++d) total *= sizes[d];
  const int64_t inner_size = sizes[nd - 1];
  const int64_t outer_total = total / (inner_size ? inner_size : 1);
  if (total == 0) return;

  auto run_rows = [&](int64_t row_begin, int64_t row_end) {
    std::array<int64_t, N> inner_strides;
    for (int k = 0; k < N; ++k) inner_strides[k] = strides[k][nd - 1];
    // Divide once for the first row, then step the outer index like an odometer: with short
    // inner runs (attention heads) a division per row cost more than the copy itself.
    int64_t idx[16];
    std::array<char*, N> ptrs = base;
    int64_t rem = row_begin;
    for (int d = nd - 2; d >= 0; --d) {
      idx[d] = rem % sizes[d];
      rem /= sizes[d];
      for (int k = 0; k < N; ++k) ptrs[k] += idx[d] * strides[k][d];
    }
    for (int64_t row = row_begin; row < row_end; ++row) {
      inner(ptrs, inner_size, inner_strides);
      if (row + 1 == row_end) break;
      for (int d = nd - 2; d >= 0; --d) {
        for (int k = 0; k < N; ++k) ptrs[k] += strides[k][d];
        if (++idx[d] < sizes[d]) break;
        for (int k = 0; k < N; ++k) ptrs[k] -= sizes[d] * strides[k][d];
        idx[d] = 0;
      }
    }
  };
  auto run_flat = [&](int64_t begin, int64_t end) {  // nd == 1: split the single run
    std::array<char*, N> ptrs = base;
    std::array<int64_t, N> inner_strides;
    for (int k = 0; k < N; ++k) {
      inner_strides[k] = strides[k][0];
      ptrs[k] += begin * strides[k][0];
    }
    inner(ptrs, end - begin, inner_strides);
  };

  const int threads = total < kParallelGrain ? 1 : split_threads();
  if (threads == 1) {
    if (nd == 1) run_flat(0, total);
    else run_rows(0, outer_total);
    return;
  }
  if (nd == 1) {
    run_parallel(threads, [&](int t, int nt) {
      const int64_t chunk = (total + nt - 1) / nt;
      const int64_t b = std::min<int64_t>(total, t * chunk), e = std::min<int64_t>(total, b + chunk);
      if (b < e) run_flat(b, e);
    });
  } else {
    run_parallel(threads, [&](int t, int nt) {
      const int64_t chunk = (outer_total + nt - 1) / nt;
      const int64_t b = std::min<int64_t>(outer_total, t * chunk), e = std::min<int64_t>(outer_total, b + chunk);
      if (b < e) run_rows(b, e);
    });
  }
}

// Runs f(begin, end) over [0, n) split across threads when n is large enough.
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  const int threads = n <= grain ? 1 : split_threads();
  if (threads == 1) {
    f(int64_t{0}, n);
    return;
  }
  run_parallel(threads, [&](int t, int nt) {
    const int64_t chunk = (n + nt - 1) / nt;
    const int64_t b = std::min<int64_t>(n, t * chunk), e = std::min<int64_t>(n, b + chunk);
    if (b < e) f(b, e);
  });
}

// n elements between a half type and fp32, in vectorized bulk conversions split over the threads.
template <class T>
constexpr bool kIsFloat8 = std::is_same_v<T, Float8E4M3FN> || std::is_same_v<T, Float8E5M2>;

// One value converted as the GPU does it: half and fp8 types through fp32, bool as x != 0.
template <class To, class From>
To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<float>(v) != 0.0f;
  } else if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16> || kIsFloat8<From>) {
    return convert<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16> || kIsFloat8<To>) {
    // fp64 -> half through fp32 would round twice; PyTorch rounds double to float first as well,
    // and so does the GPU, so we match them.
    return To(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

template <class From, class To>
void convert_parallel(const From* src, int64_t n, To* dst) {
  parallel_for(n, kParallelGrain, [&](int64_t b, int64_t e) { convert_array(src + b, dst + b, e - b); });
}

// p[0, n) as acc_t<T> values: p itself when T computes in its own type, else widened into buf
// (bulk-converted, split over the threads when kParallel; serial inside a parallel region).
template <bool kParallel = false, class T>
const acc_t<T>* as_acc(const T* p, int64_t n, std::vector<acc_t<T>>& buf) {
  if constexpr (std::is_same_v<T, acc_t<T>>) {
    return p;
  } else {
    buf.resize(static_cast<size_t>(n));
    if constexpr (kParallel) convert_parallel(p, n, buf.data());
    else convert_array(p, buf.data(), n);
    return buf.data();
  }
}

// Where to compute n acc_t<T> results bound for p: p itself, or buf for a half type, whose
// results store_acc then rounds into p.
template <class T>
acc_t<T>* acc_out(T* p, int64_t n, std::vector<acc_t<T>>& buf) {
  if constexpr (std::is_same_v<T, acc_t<T>>) {
    return p;
  } else {
    buf.resize(static_cast<size_t>(n));
    return buf.data();
  }
}

template <bool kParallel = false, class T>
void store_acc(const acc_t<T>* src, int64_t n, T* p) {
  if constexpr (std::is_same_v<T, acc_t<T>>) {
    if (src != p) std::copy(src, src + n, p);
  } else if constexpr (kParallel) {
    convert_parallel(src, n, p);
  } else {
    convert_array(src, p, n);
  }
}

// One definition for unary(Relu) and the GEMM's ReLU epilogue, so the fused linear + ReLU agrees
// with the two ops bit for bit. NaN stays NaN.
template <class A>
inline A relu_value(A x) {
  return math::Unary<UnaryOp::Relu>::forward(x, A(0), A(0));
}

template <class T>
inline acc_t<T> load(const char* p) {
  return static_cast<acc_t<T>>(*reinterpret_cast<const T*>(p));
}
template <class T>
inline void store(char* p, acc_t<T> v) {
  *reinterpret_cast<T*>(p) = static_cast<T>(v);
}

namespace detail {
template <class T>
constexpr bool is_half_type = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Elements per block of the contiguous half path: its buffers live on the stack.
constexpr int64_t kHalfBlock = 256;

// m elements of p in their acc type: p itself, or a copy widened into buf.
template <class T>
const acc_t<T>* acc_block(const T* p, int64_t m, acc_t<T>* buf) {
  if constexpr (std::is_same_v<T, acc_t<T>>) {
    return p;
  } else {
    convert_array(p, buf, m);
    return buf;
  }
}

// out[i] = f(in[i]...) over m elements of arrays that do not overlap (__restrict: the compiler
// vectorizes the loop only when it knows the output cannot alias an input).
template <class Tout, class F, class... Tin>
inline void map_block(F& f, Tout* __restrict out, int64_t m, const Tin* __restrict... in) {
  for (int64_t i = 0; i < m; ++i) out[i] = static_cast<Tout>(f(in[i]...));
}

// Contiguous operands of which some are fp16/bf16: half blocks are converted in bulk (vectorized
// F16C conversions, the same bits as one by one), so f runs over plain float arrays.
template <class Tout, class... Tin, class Block, size_t... I>
void map_contiguous_half(Block& block, Tout* o, const std::tuple<const Tin*...>& in, int64_t n,
                         std::index_sequence<I...>) {
  std::tuple<std::array<acc_t<Tin>, kHalfBlock>...> bufs;
  std::array<acc_t<Tout>, kHalfBlock> obuf;
  for (int64_t b = 0; b < n; b += kHalfBlock) {
    const int64_t m = std::min(kHalfBlock, n - b);
    const std::tuple<const acc_t<Tin>*...> a{acc_block(std::get<I>(in) + b, m, std::get<I>(bufs).data())...};
    if constexpr (is_half_type<Tout>) {
      block(obuf.data(), m, std::get<I>(a)...);
      convert_array(obuf.data(), o + b, m);
    } else {
      block(o + b, m, std::get<I>(a)...);
    }
  }
}

// f over one run of elements; contiguous runs go through block(out, m, in...) on arrays of the
// acc types (map_block of f unless the caller has a vector kernel).
template <class Tout, class... Tin, class F, class Block, size_t... I>
void map_run(F& f, Block& block, const std::array<char*, 1 + sizeof...(Tin)>& p, int64_t n,
             const std::array<int64_t, 1 + sizeof...(Tin)>& s, std::index_sequence<I...>) {
  const bool contiguous = s[0] == static_cast<int64_t>(sizeof(Tout)) &&
                          ((s[I + 1] == static_cast<int64_t>(sizeof(Tin))) && ...);
  if (contiguous) {
    Tout* o = reinterpret_cast<Tout*>(p[0]);
    const std::tuple<const Tin*...> in{reinterpret_cast<const Tin*>(p[I + 1])...};
    if constexpr (is_half_type<Tout> || (is_half_type<Tin> || ...)) {
      map_contiguous_half<Tout, Tin...>(block, o, in, n, std::index_sequence<I...>{});
    } else if constexpr (std::is_same_v<Tout, acc_t<Tout>> && (std::is_same_v<Tin, acc_t<Tin>> && ...)) {
      block(o, n, std::get<I>(in)...);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<Tout>(f(static_cast<acc_t<Tin>>(std::get<I>(in)[i])...));
    }
  } else {
    for (int64_t i = 0; i < n; ++i)
      store<Tout>(p[0] + i * s[0], static_cast<acc_t<Tout>>(f(load<Tin>(p[I + 1] + i * s[I + 1])...)));
  }
}
}  // namespace detail

template <class T> using TensorFor = std::enable_if_t<sizeof(T*) != 0, Tensor>;

// As map_elementwise below, with block(out, m, in...) computing contiguous runs from arrays of the
// acc types instead of f one element at a time (a vector kernel: it must compute what f does).
template <class Tout, class... Tin, class F, class Block>
void map_elementwise_blocks(const Tensor& out, F&& f, Block&& block, const TensorFor<Tin>&... in) {
  constexpr int N = 1 + sizeof...(Tin);
  std::array<char*, N> base{static_cast<char*>(out.raw_data()), static_cast<char*>(in.raw_data())...};
  std::array<const int64_t*, N> strides{out.strides().data(), in.strides().data()...};
  std::array<int64_t, N> sizes{static_cast<int64_t>(sizeof(Tout)), static_cast<int64_t>(sizeof(Tin))...};
  strided_loop<N>(out.shape(), base, strides, sizes,
                  [&](const std::array<char*, N>& p, int64_t n, const std::array<int64_t, N>& s) {
                    detail::map_run<Tout, Tin...>(f, block, p, n, s, std::index_sequence_for<Tin...>{});
                  });
}

// Elementwise map over tensors of one shape: out = f(in...), each read in its acc type.
template <class Tout, class... Tin, class F>
void map_elementwise(const Tensor& out, F&& f, const TensorFor<Tin>&... in) {
  auto block = [&f](acc_t<Tout>* o, int64_t m, const acc_t<Tin>*... x) { detail::map_block(f, o, m, x...); };
  map_elementwise_blocks<Tout, Tin...>(out, f, block, in...);
}

}  // namespace mixtrain::backends::cpu
