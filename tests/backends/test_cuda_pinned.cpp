// Pinned host memory and non_blocking host-to-device copies on a GPU: values survive an async
// round trip into poisoned device memory, the pinned source is held (not reused) until the copy
// ran, pinned blocks are cached, a blocking copy from pinned memory waits, non_blocking from
// pageable memory stays correct, and the DataLoader delivers pinned batches to the device.
#include <mixtrain/mixtrain.h>

#include "backends/cuda_test_util.h"
#include "mixtrain/memory/allocator.h"

namespace mixtrain::testing {
namespace {

using CudaPinned = CudaTest;

// A freed poisoned block of `shape` on the GPU: the next allocation of that size reuses it.
void* poisoned_block(const Shape& shape, DType dtype) {
  Tensor t = poisoned_on(shape, dtype, gpu_device());
  cuda::synchronize();
  return t.raw_data();
}

TEST_F(CudaPinned, AsyncRoundTripIntoPoisonedDeviceMemory) {
  for (DType dtype : {kFloat32, kFloat16, kBFloat16, kInt64}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Shape shape{257, 33};
    const Tensor x = random_tensor(shape, dtype, 11);
    const Tensor p = x.pin_memory();
    ASSERT_TRUE(p.is_pinned());
    void* block = poisoned_block(shape, dtype);
    const Tensor d = p.to(gpu_device(), /*non_blocking=*/true);
    EXPECT_EQ(d.raw_data(), block) << "the copy did not land in the poisoned block";
    EXPECT_TRUE(all_equal(d.to(Device::cpu()), to_doubles(x)));
  }
}

TEST_F(CudaPinned, AsyncCopyWithCastAndFromAView) {
  const Tensor x = random_tensor({64, 48}, kFloat32, 12);
  const Tensor p = x.pin_memory();
  (void)poisoned_block({64, 48}, kFloat16);
  const Tensor h = p.to(gpu_device(), kFloat16, /*non_blocking=*/true);
  EXPECT_EQ(h.dtype(), kFloat16);
  EXPECT_TRUE(all_equal(h.to(Device::cpu()), to_doubles(x.to(kFloat16))));
  // A transposed view of pinned memory is not dense: it is packed on the host, still correct.
  const Tensor t = p.t().to(gpu_device(), /*non_blocking=*/true);
  EXPECT_TRUE(all_equal(t.to(Device::cpu()), to_doubles(x.t().contiguous())));
}

TEST_F(CudaPinned, SourceIsHeldUntilTheCopyRanThenCached) {
  const Shape shape{1 << 16};
  const Tensor x = random_tensor(shape, kFloat32, 13);
  Tensor p = x.pin_memory();
  void* source = p.raw_data();
  const Tensor d = p.to(gpu_device(), /*non_blocking=*/true);
  p = Tensor();  // the caller lets go at once; the hold keeps the block until synchronize
  Tensor other = Tensor::empty(shape, TensorOptions().pinned_memory(true));
  EXPECT_NE(other.raw_data(), source) << "a pinned block was reused while a copy from it was queued";
  other.fill_(-7.0);
  other = Tensor();
  cuda::synchronize();  // the copy ran; the hold is released
  const memory::Stats before = memory::pinned_stats();
  const Tensor again = Tensor::empty(shape, TensorOptions().pinned_memory(true));
  const memory::Stats after = memory::pinned_stats();
  EXPECT_EQ(after.num_backing_allocs, before.num_backing_allocs) << "pinned blocks should be cached";
  EXPECT_EQ(after.num_cache_hits, before.num_cache_hits + 1);
  EXPECT_TRUE(all_equal(d.to(Device::cpu()), to_doubles(x)));
}

TEST_F(CudaPinned, PinnedCacheStatsAndEmptyCache) {
  cuda::synchronize();  // releases the holds of earlier tests' copies
  memory::empty_pinned_cache();
  const memory::Stats start = memory::pinned_stats();
  EXPECT_EQ(start.reserved_bytes, start.allocated_bytes) << "empty_pinned_cache kept free segments";
  memory::Stats with_a;
  {
    const Tensor a = Tensor::empty({3000}, TensorOptions().pinned_memory(true));
    EXPECT_TRUE(a.is_pinned());
    with_a = memory::pinned_stats();
    EXPECT_GT(with_a.allocated_bytes, start.allocated_bytes);
  }
  const Tensor b = Tensor::empty({3000}, TensorOptions().pinned_memory(true));
  const memory::Stats s = memory::pinned_stats();
  EXPECT_EQ(s.num_backing_allocs, with_a.num_backing_allocs) << "the freed pinned block was not reused";
  EXPECT_EQ(s.num_cache_hits, with_a.num_cache_hits + 1);
  EXPECT_NE(memory::pinned_allocator().name().find("cudaHostAlloc"), std::string::npos);
  // Pinned memory is counted apart from the pageable CPU cache.
  const int64_t cpu_allocs = memory::stats(Device::cpu()).num_allocs;
  const Tensor c = Tensor::empty({3000}, TensorOptions().pinned_memory(true));
  EXPECT_EQ(memory::stats(Device::cpu()).num_allocs, cpu_allocs);
  EXPECT_EQ(memory::pinned_stats().num_allocs, s.num_allocs + 1);
}

TEST_F(CudaPinned, BlockingCopyFromPinnedWaits) {
  const Tensor x = random_tensor({1 << 18}, kFloat32, 14);
  Tensor p = x.pin_memory();
  const Tensor d = p.to(gpu_device());
  p.fill_(3.0);  // a blocking copy has finished reading p by now
  EXPECT_TRUE(all_equal(d.to(Device::cpu()), to_doubles(x)));
}

TEST_F(CudaPinned, NonBlockingFromPageableMemoryIsStillCorrect) {
  const Tensor x = random_tensor({1 << 18}, kFloat32, 15);
  Tensor src = x.clone();
  ASSERT_FALSE(src.is_pinned());
  (void)poisoned_block({1 << 18}, kFloat32);
  const Tensor d = src.to(gpu_device(), /*non_blocking=*/true);
  src.fill_(5.0);  // from pageable memory the bytes were staged before the call returned
  EXPECT_TRUE(all_equal(d.to(Device::cpu()), to_doubles(x)));
}

TEST_F(CudaPinned, DataLoaderDeliversPinnedBatchesToTheDevice) {
  const Tensor xs = random_tensor({10, 3}, kFloat32, 16);
  const data::TensorDataset ds(xs, arange(10, TensorOptions(kInt64)));
  data::DataLoader loader(ds, data::DataLoaderOptions().batch_size(4).num_workers(2).pin_memory(true).device(gpu_device()));
  ASSERT_TRUE(loader.pins_memory());
  std::vector<double> got;
  data::Batch b;
  while (loader.next(b)) {
    EXPECT_TRUE(b.data.device().is_cuda());
    const std::vector<double> v = to_doubles(b.data.to(Device::cpu()));
    got.insert(got.end(), v.begin(), v.end());
  }
  EXPECT_EQ(got, to_doubles(xs));
}

}  // namespace
}  // namespace mixtrain::testing
