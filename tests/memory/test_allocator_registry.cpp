// Options from the environment, the per-device registry, the Stats JSON form, the system backing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "memory/backing.h"
#include "memory/counting_backing.h"
#include "mixtrain/base/error.h"
#include "mixtrain/memory/allocator.h"
#include "mixtrain/memory/caching_allocator.h"
#include "support/testing.h"

namespace mixtrain::memory::testing {
namespace {

// Sets (or unsets) a variable for one scope and restores what was there.
class EnvGuard {
 public:
  EnvGuard(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~EnvGuard() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// from_env() rejects name=value with an error naming both.
void expect_env_error(const char* name, const char* value) {
  EnvGuard guard(name, value);
  mixtrain::testing::expect_error([] { CachingAllocatorOptions::from_env(); }, {name, value});
}

TEST(AllocatorEnv, DefaultsWhenUnset) {
  EnvGuard s("MIXTRAIN_ALLOCATOR_STRATEGY", nullptr);
  EnvGuard f("MIXTRAIN_MEMORY_FRACTION", nullptr);
  EnvGuard l("MIXTRAIN_MEMORY_LIMIT_MB", "");
  const auto o = CachingAllocatorOptions::from_env();
  EXPECT_EQ(o.strategy(), Strategy::AutoGrowth);
  EXPECT_DOUBLE_EQ(o.memory_fraction(), 0.92);
  EXPECT_EQ(o.limit_bytes(), -1);
}

TEST(AllocatorEnv, ReadsValidValues) {
  EnvGuard s("MIXTRAIN_ALLOCATOR_STRATEGY", "pre_allocate");
  EnvGuard f("MIXTRAIN_MEMORY_FRACTION", "0.5");
  EnvGuard l("MIXTRAIN_MEMORY_LIMIT_MB", "256");
  auto o = CachingAllocatorOptions::from_env();
  EXPECT_EQ(o.strategy(), Strategy::PreAllocate);
  EXPECT_DOUBLE_EQ(o.memory_fraction(), 0.5);
  EXPECT_EQ(o.limit_bytes(), int64_t{256} << 20);
  {
    EnvGuard s2("MIXTRAIN_ALLOCATOR_STRATEGY", "none");
    EnvGuard l2("MIXTRAIN_MEMORY_LIMIT_MB", "0.5");
    o = CachingAllocatorOptions::from_env();
    EXPECT_EQ(o.strategy(), Strategy::None);
    EXPECT_EQ(o.limit_bytes(), int64_t{1} << 19);
  }
  EnvGuard s3("MIXTRAIN_ALLOCATOR_STRATEGY", "auto_growth");
  EnvGuard l3("MIXTRAIN_MEMORY_LIMIT_MB", "0");  // documented: 0 means no limit
  o = CachingAllocatorOptions::from_env();
  EXPECT_EQ(o.strategy(), Strategy::AutoGrowth);
  EXPECT_EQ(o.limit_bytes(), -1);
}

TEST(AllocatorEnv, BadValuesNameTheVariableAndTheValue) {
  expect_env_error("MIXTRAIN_ALLOCATOR_STRATEGY", "bogus");
  expect_env_error("MIXTRAIN_ALLOCATOR_STRATEGY", "AutoGrowth");
  expect_env_error("MIXTRAIN_MEMORY_FRACTION", "1.5");
  expect_env_error("MIXTRAIN_MEMORY_FRACTION", "0");
  expect_env_error("MIXTRAIN_MEMORY_FRACTION", "-0.25");
  expect_env_error("MIXTRAIN_MEMORY_FRACTION", "half");
  expect_env_error("MIXTRAIN_MEMORY_FRACTION", "nan");
  expect_env_error("MIXTRAIN_MEMORY_LIMIT_MB", "-5");
  expect_env_error("MIXTRAIN_MEMORY_LIMIT_MB", "12abc");
  expect_env_error("MIXTRAIN_MEMORY_LIMIT_MB", "inf");
  // Not plain decimal, or a cap that rounds to nothing (once a hex 16 MiB and a 0-byte cap).
  for (const char* v : {"0x10", "0X10", "1e-9", "1e3", "+5", " 5", "5 ", "1.", ".5", "1.2.3", "0.0000000001", "nan"})
    expect_env_error("MIXTRAIN_MEMORY_LIMIT_MB", v);
  expect_env_error("MIXTRAIN_MEMORY_FRACTION", "0x0.8p0");
}

TEST(AllocatorRegistry, CpuAllocatorIsOneCachingAllocatorPerProcess) {
  Allocator& a = allocator_for(Device::cpu());
  EXPECT_EQ(&a, &allocator_for(Device::cpu()));
  EXPECT_EQ(a.device(), Device::cpu());
  EXPECT_NE(dynamic_cast<CachingAllocator*>(&a), nullptr);
  const int64_t before = stats(Device::cpu()).allocated_bytes;
  void* p = a.allocate(1000);
  EXPECT_EQ(stats(Device::cpu()).allocated_bytes, before + 1024);
  a.deallocate(p);
  reset_peak_stats(Device::cpu());
  EXPECT_EQ(stats(Device::cpu()).peak_allocated_bytes, before);
  empty_cache(Device::cpu());
  EXPECT_THROW(allocator_for(Device{DeviceType::CPU, 1}), Error);
}

TEST(AllocatorRegistry, SetAllocatorReplacesAndRestores) {
  Allocator& original = allocator_for(Device::cpu());
  CountingBackingAllocator backing;
  CachingAllocator mine(backing, Device::cpu(), CachingAllocatorOptions().strategy(Strategy::None));
  set_allocator(Device::cpu(), &mine);
  EXPECT_EQ(&allocator_for(Device::cpu()), &mine);
  void* p = allocator_for(Device::cpu()).allocate(10);
  EXPECT_EQ(stats(Device::cpu()).num_allocs, 1);
  allocator_for(Device::cpu()).deallocate(p);
  set_allocator(Device::cpu(), nullptr);
  EXPECT_EQ(&allocator_for(Device::cpu()), &original);
  EXPECT_THROW(set_allocator(Device::cuda(0), &mine), Error);  // it serves the CPU
}

TEST(AllocatorRegistry, CudaNeedsARegisteredBacking) {
  if (has_backing_factory(DeviceType::CUDA)) GTEST_SKIP() << "a CUDA backend registered its allocator";
  mixtrain::testing::expect_error([] { allocator_for(Device::cuda(0)); }, "CUDA");
  // A backend registers its factory; devices it does not have are reported.
  register_backing_factory(DeviceType::CUDA, [](int index) -> std::unique_ptr<BackingAllocator> {
    if (index != 3) return nullptr;
    return std::make_unique<SystemBackingAllocator>();
  });
  Allocator& a = allocator_for(Device::cuda(3));
  EXPECT_EQ(a.device(), Device::cuda(3));
  a.deallocate(a.allocate(4096));
  EXPECT_EQ(stats(Device::cuda(3)).num_allocs, 1);
  mixtrain::testing::expect_error([] { allocator_for(Device::cuda(1)); }, "not available");
}

TEST(AllocatorStats, JsonHasEveryField) {
  Stats s;
  int64_t v = 1;
  for (int64_t* f : {&s.allocated_bytes, &s.reserved_bytes, &s.peak_allocated_bytes, &s.peak_reserved_bytes,
                     &s.requested_bytes, &s.num_allocs, &s.num_frees, &s.num_backing_allocs,
                     &s.num_backing_frees, &s.num_cache_hits, &s.num_splits, &s.num_merges, &s.num_ooms,
                     &s.num_alloc_retries, &s.limit_bytes, &s.largest_free_block, &s.num_searches,
                     &s.num_plan_hits, &s.num_plan_misses})
    *f = v++;
  const nlohmann::json j = s;
  EXPECT_EQ(j.size(), 19u);
  EXPECT_EQ(j.at("num_searches"), 17);
  EXPECT_EQ(j.at("num_plan_hits"), 18);
  EXPECT_EQ(j.at("num_plan_misses"), 19);
  EXPECT_EQ(j.at("allocated_bytes"), 1);
  EXPECT_EQ(j.at("peak_reserved_bytes"), 4);
  EXPECT_EQ(j.at("num_ooms"), 13);
  EXPECT_EQ(j.at("num_alloc_retries"), 14);
  EXPECT_EQ(j.at("limit_bytes"), 15);
  EXPECT_EQ(j.at("largest_free_block"), 16);
}

TEST(SystemBacking, AlignedAndReportsFreeMemory) {
  SystemBackingAllocator sys;
  for (size_t n : {size_t{0}, size_t{1}, size_t{300}, size_t{5} << 20}) {
    void* p = sys.alloc(n);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(addr(p) % SystemBackingAllocator::kAlignment, 0u);
    sys.free(p, n);
  }
  EXPECT_GT(sys.free_device_memory(), 0u);
}

}  // namespace
}  // namespace mixtrain::memory::testing
