// Copies between any two dtypes and layouts, and fills.
#include "kernels/cuda/copy.h"
#include "elementwise_loops.cuh"

namespace mixtrain::kernels {

namespace {

struct Identity {
  template <class A>
  __device__ __forceinline__ A operator()(A x) const { return x; }
};

template <class T>
struct Constant {
  T value;
  __device__ __forceinline__ T operator()() const { return value; }
};

}  // namespace

void copy(const ElemIter<2>& it, DType dst, DType src, cudaStream_t stream) {
  dispatch_all_and_float8(dst, "copy", [&](auto to_tag) {
    using To = typename decltype(to_tag)::type;
    dispatch_all_and_float8(src, "copy", [&](auto from_tag) {
      using From = typename decltype(from_tag)::type;
      launch_map<To, From>(it, Identity{}, stream, "copy");
    });
  });
}

void fill(const ElemIter<1>& it, DType dtype, double value, cudaStream_t stream) {
  dispatch_all_and_float8(dtype, "fill", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_map<T>(it, Constant<T>{host_value<T>(value)}, stream, "fill");
  });
}

}  // namespace mixtrain::kernels
