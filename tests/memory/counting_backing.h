#pragma once
// A BackingAllocator test double: real memory (so tests can write patterns into blocks), every
// call counted, sizes checked on free, and an optional capacity beyond which it refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <vector>

#include "mixtrain/memory/caching_allocator.h"

namespace mixtrain::memory::testing {

constexpr size_t KiB = size_t{1} << 10;
constexpr size_t MiB = size_t{1} << 20;

class CountingBackingAllocator : public BackingAllocator {
 public:
  static constexpr size_t kUnlimited = std::numeric_limits<size_t>::max();

  // reported_free == 0: report capacity - held (or 256 MiB without a capacity).
  explicit CountingBackingAllocator(size_t capacity = kUnlimited, size_t reported_free = 0)
      : capacity_(capacity), reported_free_(reported_free) {}

  ~CountingBackingAllocator() override {
    EXPECT_EQ(held_, 0u) << "the allocator did not return every segment";
    for (auto& entry : live_) std::free(entry.first);
  }

  void* alloc(size_t nbytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++calls_;
    if (nbytes > capacity_ - held_) {
      ++refusals_;
      return nullptr;
    }
    void* p = std::aligned_alloc(256, std::max<size_t>(256, (nbytes + 255) / 256 * 256));
    if (!p) return nullptr;
    live_[p] = nbytes;
    held_ += nbytes;
    peak_held_ = std::max(peak_held_, held_);
    alloc_sizes_.push_back(nbytes);
    return p;
  }

  void free(void* ptr, size_t nbytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(ptr);
    if (it == live_.end()) {
      ADD_FAILURE() << "free of a pointer this backing allocator did not give out";
      return;
    }
    EXPECT_EQ(it->second, nbytes) << "free with a size other than the one allocated";
    held_ -= it->second;
    live_.erase(it);
    ++frees_;
    std::free(ptr);
  }

  size_t free_device_memory() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (reported_free_) return reported_free_;
    return capacity_ == kUnlimited ? 256 * MiB : capacity_ - held_;
  }

  std::string name() const override { return "counting"; }

  size_t held() const { return locked(held_); }
  size_t peak_held() const { return locked(peak_held_); }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_held_ = held_;
  }
  int64_t allocs() const { return static_cast<int64_t>(locked(alloc_sizes_).size()); }
  int64_t frees() const { return locked(frees_); }
  int64_t calls() const { return locked(calls_); }
  int64_t refusals() const { return locked(refusals_); }
  std::vector<size_t> alloc_sizes() const { return locked(alloc_sizes_); }
  size_t segments() const { return locked(live_).size(); }

 private:
  template <class T>
  T locked(const T& v) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return v;
  }

  mutable std::mutex mutex_;
  size_t capacity_;
  size_t reported_free_;
  size_t held_ = 0;
  size_t peak_held_ = 0;
  int64_t calls_ = 0;
  int64_t refusals_ = 0;
  int64_t frees_ = 0;
  std::vector<size_t> alloc_sizes_;
  std::map<void*, size_t> live_;
};

inline uintptr_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

}  // namespace mixtrain::memory::testing
