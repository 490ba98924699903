// max_pool2d and 2-D upsampling (nearest, bilinear) on NCHW planes. Forward kernels gather one
// output each; the backward kernels scatter with atomics into the gradient (fp32, fp64) or into
// an fp32 buffer rounded once (half types), since several outputs may feed one input.
#include <cfloat>

#include "kernels/cuda/pool_upsample.h"
#include "common.cuh"

namespace mixtrain::kernels {

using backends::Pool2dParams;
using backends::Upsample2dParams;
using backends::UpsampleMode;

namespace {

// Output element k (in memory order) as output pixel (i, j) of a plane whose input pixel
// ih * w + iw lies at in_base + (ih * w + iw) * step: NCHW planes are contiguous; channels-last
// planes interleave, C apart, so neighbouring threads read neighbouring channels.
struct PoolSite {
  int64_t i, j, in_base, step;
};

__device__ __forceinline__ PoolSite pool_site(const Planes& p, int64_t k) {
  if (p.channels_last > 0) {
    const int64_t c = k % p.channels_last, pixel = k / p.channels_last;
    const int64_t n = pixel / (p.wo * p.ho);
    return {(pixel / p.wo) % p.ho, pixel % p.wo, n * p.h * p.w * p.channels_last + c, p.channels_last};
  }
  return {(k / p.wo) % p.ho, k % p.wo, (k / (p.wo * p.ho)) * p.h * p.w, 1};
}

template <class T>
__global__ void max_pool_kernel(const T* __restrict__ x, Planes p, Pool2dParams q, T* __restrict__ out,
                                int64_t* __restrict__ indices) {
  using W = acc_t<T>;
  const int64_t total = p.planes * p.ho * p.wo, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += stride) {
    const PoolSite site = pool_site(p, k);
    const int64_t i = site.i, j = site.j;
    const T* src = x + site.in_base;
    W best = -INFINITY;
    int64_t arg = -1;
    for (int64_t ki = 0; ki < q.kernel_h; ++ki) {
      const int64_t ih = i * q.stride_h - q.pad_h + ki * q.dilation_h;
      if (ih < 0 || ih >= p.h) continue;
      for (int64_t kj = 0; kj < q.kernel_w; ++kj) {
        const int64_t iw = j * q.stride_w - q.pad_w + kj * q.dilation_w;
        if (iw < 0 || iw >= p.w) continue;
        const W v = convert<W>(src[(ih * p.w + iw) * site.step]);
        // NaN wins and stays; the first of equal maxima wins (as the CPU backend).
        if (arg < 0 || v > best || (v != v && best == best)) {
          best = v;
          arg = ih * p.w + iw;
        }
      }
    }
    out[k] = convert<T>(best);
    indices[k] = arg;
  }
}

// Scatter-add of each output's gradient onto its argmax (-1: a window of padding only).
template <class T, class B>
__global__ void max_pool_backward_kernel(const T* __restrict__ grad_out, const int64_t* __restrict__ indices, Planes p,
                                         B* accum) {
  const int64_t total = p.planes * p.ho * p.wo, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += stride) {
    const int64_t idx = indices[k];
    if (idx < 0) continue;
    const PoolSite site = pool_site(p, k);
    atomicAdd(accum + site.in_base + idx * site.step, static_cast<B>(convert<acc_t<T>>(grad_out[k])));
  }
}

// PyTorch's nearest_idx (fp32 floor) and area_pixel_compute_source_index (compute type).
__device__ __forceinline__ int64_t nearest_src(int64_t o, int64_t in, double scale) {
  return min64(static_cast<int64_t>(floorf(static_cast<float>(o) * static_cast<float>(scale))), in - 1);
}

template <class W>
struct Tap {
  int64_t i0, i1;
  W w0, w1;
};

template <class W>
__device__ __forceinline__ Tap<W> linear_tap(int64_t o, int64_t in, W scale, bool align_corners) {
  W src = align_corners ? scale * static_cast<W>(o) : scale * (static_cast<W>(o) + W(0.5)) - W(0.5);
  if (src < 0) src = 0;
  const int64_t i0 = min64(static_cast<int64_t>(src), in - 1);
  W l1 = src - static_cast<W>(i0);
  if (l1 > W(1)) l1 = W(1);
  return {i0, i0 < in - 1 ? i0 + 1 : i0, W(1) - l1, l1};
}

template <class T>
__global__ void upsample_kernel(const T* __restrict__ x, Planes p, Upsample2dParams q, T* __restrict__ out) {
  using W = acc_t<T>;
  const int64_t total = p.planes * p.ho * p.wo, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += stride) {
    const int64_t j = k % p.wo, i = (k / p.wo) % p.ho, pl = k / (p.wo * p.ho);
    const T* src = x + pl * p.h * p.w;
    if (q.mode == UpsampleMode::Nearest) {
      out[k] = src[nearest_src(i, p.h, q.scale_h) * p.w + nearest_src(j, p.w, q.scale_w)];
      continue;
    }
    const Tap<W> th = linear_tap<W>(i, p.h, static_cast<W>(q.scale_h), q.align_corners);
    const Tap<W> tw = linear_tap<W>(j, p.w, static_cast<W>(q.scale_w), q.align_corners);
    const W top = tw.w0 * convert<W>(src[th.i0 * p.w + tw.i0]) + tw.w1 * convert<W>(src[th.i0 * p.w + tw.i1]);
    const W bottom = tw.w0 * convert<W>(src[th.i1 * p.w + tw.i0]) + tw.w1 * convert<W>(src[th.i1 * p.w + tw.i1]);
    out[k] = convert<T>(th.w0 * top + th.w1 * bottom);
  }
}

template <class T, class B>
__global__ void upsample_backward_kernel(const T* __restrict__ grad_out, Planes p, Upsample2dParams q, B* accum) {
  using W = acc_t<T>;
  const int64_t total = p.planes * p.ho * p.wo, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += stride) {
    const int64_t j = k % p.wo, i = (k / p.wo) % p.ho, pl = k / (p.wo * p.ho);
    B* dst = accum + pl * p.h * p.w;
    const W v = convert<W>(grad_out[k]);
    if (q.mode == UpsampleMode::Nearest) {
      atomicAdd(dst + nearest_src(i, p.h, q.scale_h) * p.w + nearest_src(j, p.w, q.scale_w), static_cast<B>(v));
      continue;
    }
    const Tap<W> th = linear_tap<W>(i, p.h, static_cast<W>(q.scale_h), q.align_corners);
    const Tap<W> tw = linear_tap<W>(j, p.w, static_cast<W>(q.scale_w), q.align_corners);
    const W top = th.w0 * v, bottom = th.w1 * v;
    atomicAdd(dst + th.i0 * p.w + tw.i0, static_cast<B>(tw.w0 * top));
    atomicAdd(dst + th.i0 * p.w + tw.i1, static_cast<B>(tw.w1 * top));
    atomicAdd(dst + th.i1 * p.w + tw.i0, static_cast<B>(tw.w0 * bottom));
    atomicAdd(dst + th.i1 * p.w + tw.i1, static_cast<B>(tw.w1 * bottom));
  }
}

}  // namespace

void max_pool2d(DType dtype, const void* x, const Planes& p, const Pool2dParams& q, void* out, int64_t* indices,
                cudaStream_t stream) {
  const int64_t total = p.planes * p.ho * p.wo;
  if (total == 0) return;
  dispatch_floating(dtype, "max_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    max_pool_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(static_cast<const T*>(x), p, q,
                                                                           static_cast<T*>(out), indices);
  });
  check_launch("max_pool2d");
}

void max_pool2d_backward(DType dtype, const void* grad_out, const int64_t* indices, const Planes& p, void* grad_x,
                         void* accum, cudaStream_t stream) {
  scatter_add(dtype, "max_pool2d_backward", p.planes * p.h * p.w, p.planes * p.ho * p.wo > 0, grad_x, accum, stream, [&](auto tag, auto* buf) {
    using T = typename decltype(tag)::type;
    using B = std::remove_pointer_t<decltype(buf)>;
    max_pool_backward_kernel<T, B><<<blocks_for(p.planes * p.ho * p.wo, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(grad_out), indices, p, buf);
  });
}

void upsample2d(DType dtype, const void* x, const Planes& p, const Upsample2dParams& q, void* out,
                cudaStream_t stream) {
  const int64_t total = p.planes * p.ho * p.wo;
  if (total == 0) return;
  dispatch_floating(dtype, "upsample2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    upsample_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(static_cast<const T*>(x), p, q,
                                                                           static_cast<T*>(out));
  });
  check_launch("upsample2d");
}

void upsample2d_backward(DType dtype, const void* grad_out, const Planes& p, const Upsample2dParams& q, void* grad_x,
                         void* accum, cudaStream_t stream) {
  scatter_add(dtype, "upsample2d_backward", p.planes * p.h * p.w, p.planes * p.ho * p.wo > 0, grad_x, accum, stream, [&](auto tag, auto* buf) {
    using T = typename decltype(tag)::type;
    using B = std::remove_pointer_t<decltype(buf)>;
    upsample_backward_kernel<T, B><<<blocks_for(p.planes * p.ho * p.wo, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(grad_out), p, q, buf);
  });
}

}  // namespace mixtrain::kernels
