// AutocastGuard state (nesting, save/restore, per device type, per thread), the policies on mixed
// inputs, misuse errors, in-place ops, and the statistics.
#include <atomic>
#include <cstring>
#include <map>
#include <thread>

#include "amp_test_util.h"
#include "mixtrain/memory/dry_run.h"

namespace mixtrain::amp_test {
namespace {

namespace F = nn::functional;
using amp::AutocastGuard;
using amp::CastPolicy;
constexpr DeviceType kCpu = DeviceType::CPU;
constexpr DeviceType kCuda = DeviceType::CUDA;

using AutocastScopeTest = AmpTest;

TEST_F(AutocastScopeTest, DefaultsOutsideAnyScope) {
  for (DeviceType t : {kCpu, kCuda}) {
    EXPECT_FALSE(amp::is_autocast_enabled(t));
    EXPECT_EQ(amp::autocast_dtype(t), kFloat16);  // fp16 on CPU too: CPU reproduces GPU AMP
  }
  EXPECT_TRUE(amp::is_autocast_cache_enabled());
  EXPECT_EQ(matmul(randn({2, 3}), randn({3, 2})).dtype(), kFloat32);
}

TEST_F(AutocastScopeTest, NestingSavesAndRestoresEachLevel) {
  const Tensor a = randn({2, 3}), b = randn({3, 2});
  {
    AutocastGuard outer(kCpu, kFloat16);
    EXPECT_TRUE(amp::is_autocast_enabled(kCpu));
    EXPECT_EQ(matmul(a, b).dtype(), kFloat16);
    {
      AutocastGuard inner(kCpu, kBFloat16, true, /*cache_enabled=*/false);
      EXPECT_EQ(amp::autocast_dtype(kCpu), kBFloat16);
      EXPECT_FALSE(amp::is_autocast_cache_enabled());
      EXPECT_EQ(matmul(a, b).dtype(), kBFloat16);
      {
        AutocastGuard off(kCpu, kFloat16, /*enabled=*/false);
        EXPECT_FALSE(amp::is_autocast_enabled(kCpu));
        EXPECT_EQ(matmul(a, b).dtype(), kFloat32);
        // Ops run in their input dtypes: fp16 stays fp16, fp32 fp32, mixed is the caller's problem.
        EXPECT_EQ(matmul(a.half(), b.half()).dtype(), kFloat16);
        EXPECT_THROW(matmul(a.half(), b), Error);
        {
          AutocastGuard again(kCpu, kBFloat16);  // re-entering needs no manual casts
          EXPECT_EQ(matmul(a.half(), b).dtype(), kBFloat16);
        }
        EXPECT_FALSE(amp::is_autocast_enabled(kCpu));
      }
      EXPECT_TRUE(amp::is_autocast_enabled(kCpu));
      EXPECT_EQ(matmul(a, b).dtype(), kBFloat16);
    }
    EXPECT_EQ(amp::autocast_dtype(kCpu), kFloat16);
    EXPECT_TRUE(amp::is_autocast_cache_enabled());
    EXPECT_EQ(matmul(a, b).dtype(), kFloat16);
  }
  EXPECT_FALSE(amp::is_autocast_enabled(kCpu));
  EXPECT_EQ(matmul(a, b).dtype(), kFloat32);
}

TEST_F(AutocastScopeTest, StateIsPerDeviceType) {
  AutocastGuard cuda(kCuda, kBFloat16);
  EXPECT_TRUE(amp::is_autocast_enabled(kCuda));
  EXPECT_FALSE(amp::is_autocast_enabled(kCpu));
  EXPECT_EQ(amp::autocast_dtype(kCpu), kFloat16);
  EXPECT_EQ(matmul(randn({2, 3}), randn({3, 2})).dtype(), kFloat32);  // CPU tensors are not cast
  EXPECT_EQ(amp::autocast_stats().total_ops(), 0u) << "ops on another device type are not autocast";
  AutocastGuard cpu(kCpu, kFloat16);
  EXPECT_EQ(matmul(randn({2, 3}), randn({3, 2})).dtype(), kFloat16);
  EXPECT_EQ(amp::autocast_dtype(kCuda), kBFloat16);
}

TEST_F(AutocastScopeTest, UnsupportedDtypeIsRejected) {
  for (DType bad : {kFloat32, kFloat64, kInt64, kBool}) {
    expect_error([&] { AutocastGuard g(kCpu, bad); }, {"AutocastGuard", "unsupported autocast dtype", dtype_name(bad),
                                                       "float16 or bfloat16"});
    expect_error([&] { AutocastGuard g(kCpu, bad, /*enabled=*/false); }, {dtype_name(bad)});
  }
  EXPECT_FALSE(amp::is_autocast_enabled(kCpu)) << "a rejected guard must leave the state alone";
  EXPECT_EQ(matmul(randn({2, 3}), randn({3, 2})).dtype(), kFloat32);
}

TEST_F(AutocastScopeTest, StateIsThreadLocal) {
  const Tensor a = randn({2, 3}), b = randn({3, 2});
  AutocastGuard here(kCpu, kFloat16);
  DType other_dtype = kBool, other_scoped = kBool;
  bool other_enabled = true;
  std::thread t([&] {
    other_enabled = amp::is_autocast_enabled(kCpu);
    other_dtype = matmul(a, b).dtype();
    AutocastGuard there(kCpu, kBFloat16);
    other_scoped = matmul(a, b).dtype();
  });
  t.join();
  EXPECT_FALSE(other_enabled);
  EXPECT_EQ(other_dtype, kFloat32);
  EXPECT_EQ(other_scoped, kBFloat16);
  EXPECT_EQ(amp::autocast_dtype(kCpu), kFloat16) << "the other thread's guard must not touch this thread";
  EXPECT_EQ(matmul(a, b).dtype(), kFloat16);
}

TEST_F(AutocastScopeTest, BannedOpRaisesWithAdvice) {
  const Tensor p = full({4}, 0.3), y = full({4}, 1.0);
  {
    AutocastGuard autocast(kCpu);
    expect_error([&] { F::binary_cross_entropy(p, y); },
                 {"binary_cross_entropy", "unsafe to autocast", "binary_cross_entropy_with_logits", "[4] float32 cpu"});
    EXPECT_THROW(F::binary_cross_entropy(p.to(kFloat64), y.to(kFloat64)), Error);
    AutocastGuard off(kCpu, kFloat16, false);
    EXPECT_NEAR(F::binary_cross_entropy(p, y).item<float>(), -std::log(0.3), 1e-6);
  }
  EXPECT_NEAR(F::binary_cross_entropy(p, y).item<float>(), -std::log(0.3), 1e-6);
  amp::set_policy("exp", CastPolicy::Banned);
  AutocastGuard autocast(kCpu);
  expect_error([&] { exp(p); }, {"exp", "banned under autocast", "[4] float32 cpu"});
}

TEST_F(AutocastScopeTest, PromoteRunsInTheWidestInputType) {
  const Tensor a = randn({5}), b = randn({5});
  EXPECT_THROW(dot(a.half(), b), Error) << "outside autocast dot needs one dtype";
  AutocastGuard autocast(kCpu, kFloat16);
  EXPECT_EQ(dot(a.half(), b).dtype(), kFloat32);
  EXPECT_EQ(dot(a.bfloat16(), b).dtype(), kFloat32);
  EXPECT_EQ(dot(a.half(), b.half()).dtype(), kFloat16);
  EXPECT_EQ(dot(a.bfloat16(), b.bfloat16()).dtype(), kBFloat16);
  EXPECT_EQ(dot(a.to(kFloat64), b.to(kFloat64)).dtype(), kFloat64);
  EXPECT_EQ(addcmul(a.half(), a.half(), b).dtype(), kFloat32);
  EXPECT_EQ(addcmul(a.half(), a.half(), b.half(), 2.0).dtype(), kFloat16);
  expect_error([&] { dot(a.half(), b.bfloat16()); }, {"dot", "float16", "bfloat16", "[5]"});
  expect_error([&] { addcmul(a, a.half(), b.bfloat16()); }, {"addcmul", "float16 and bfloat16"});
}

TEST_F(AutocastScopeTest, MixedInputsUnderEachPolicy) {
  const Tensor x = randn({2, 3}), w = randn({3, 3});
  AutocastGuard autocast(kCpu, kBFloat16);
  EXPECT_EQ(matmul(x, w.half()).dtype(), kBFloat16);                          // lower precision
  EXPECT_EQ(linear(x.to(kFloat64), w.to(kFloat64)).dtype(), kFloat64);         // fp64 never cast
  EXPECT_EQ(F::mse_loss(x.half(), x).dtype(), kFloat32);                       // fp32
  EXPECT_EQ(sum(x.half()).dtype(), kFloat32);                                  // fp32 via dtype
  EXPECT_EQ(sum(x.half(), {}, false, kFloat16).dtype(), kFloat16);             // a given dtype is kept
  EXPECT_EQ(softmax(x.bfloat16(), 1, kBFloat16).dtype(), kBFloat16);
  EXPECT_EQ(add(x.half(), x).dtype(), kFloat32);                               // passthrough: promotion
  EXPECT_EQ(add(x.half(), x.half()).dtype(), kFloat16);
}

// An fp32_set_opt_dtype policy put on an op without a dtype argument computes in fp32.
TEST_F(AutocastScopeTest, OptDtypePolicyOnOpWithoutDtypeArgument) {
  amp::set_policy("relu", CastPolicy::Float32OptDtype);
  AutocastGuard autocast(kCpu);
  EXPECT_EQ(relu(randn({3}).half()).dtype(), kFloat32);
}

// In-place ops do not go through the hook. Give add the lower-precision policy: the out-of-place
// add rounds to fp16, the in-place one keeps fp32 and its exact value.
TEST_F(AutocastScopeTest, InPlaceOpsAreNotAutocast) {
  amp::set_policy("add", CastPolicy::LowerPrecision);
  const float base = 1.0f + std::ldexp(1.0f, -20);  // not representable in fp16
  Tensor a = full({3}, base), b = full({3}, std::ldexp(1.0, -21));
  AutocastGuard autocast(kCpu);
  EXPECT_EQ(add(a, b).dtype(), kFloat16);
  amp::reset_autocast_stats();
  a.add_(b);
  EXPECT_EQ(amp::autocast_stats().total_ops(), 0u);
  EXPECT_EQ(amp::autocast_stats().casts, 0u);
  EXPECT_EQ(a.dtype(), kFloat32);
  EXPECT_EQ(a.to_vector<float>()[0], base + std::ldexp(1.0f, -21));
}

TEST_F(AutocastScopeTest, StatsCountOpsCastsAndCache) {
  const Tensor x = randn({4, 8}), xh = x.half();
  const Tensor w = randn({8, 2}, TensorOptions().requires_grad(true));
  {
    AutocastGuard autocast(kCpu, kFloat16);
    Tensor y = matmul(x, w);   // casts x (activation) and w (cache miss)
    Tensor z = matmul(xh, w);  // w: cache hit, no cast
    Tensor e = exp(y);             // fp16 -> fp32 cast
    Tensor s = sum(y);             // fp32 through its dtype argument: no cast
    (void)z, (void)e, (void)s;
  }
  const amp::AutocastStats st = amp::autocast_stats();
  EXPECT_EQ(st.ops_of(kFloat16, CastPolicy::LowerPrecision), 2u);
  EXPECT_EQ(st.ops_of(kFloat32, CastPolicy::Float32), 1u);
  EXPECT_EQ(st.ops_of(kFloat32, CastPolicy::Float32OptDtype), 1u);
  EXPECT_EQ(st.ops_by_dtype(kFloat32), 2u);
  EXPECT_EQ(st.ops_by_policy(CastPolicy::LowerPrecision), 2u);
  EXPECT_EQ(st.total_ops(), 4u);
  EXPECT_EQ(st.casts, 3u);  // x, w, y
  EXPECT_EQ(st.cast_bytes, (4u * 8 + 8 * 2) * 2 + 4 * 2 * 4);
  EXPECT_EQ(st.cache_misses, 1u);
  EXPECT_EQ(st.cache_hits, 1u);
  const nlohmann::json j = st;
  EXPECT_EQ(j.at("ops").at("float16").at("lower_precision"), 2);
  EXPECT_EQ(j.at("ops_by_policy").at("fp32"), 1);
  EXPECT_EQ(j.at("casts"), 3);
  EXPECT_EQ(j.at("cache_hits"), 1);
  EXPECT_EQ(j.at("cache_misses"), 1);
  EXPECT_EQ(j.at("cast_bytes"), st.cast_bytes);
  amp::reset_autocast_stats();
  EXPECT_EQ(amp::autocast_stats().total_ops(), 0u);
  EXPECT_EQ(nlohmann::json(amp::autocast_stats()).at("ops"), nlohmann::json::object());
}

TEST_F(AutocastScopeTest, StatsAreSummedOverThreads) {
  constexpr int kThreads = 4, kOps = 200;
  // Inputs made here: the default generator is not meant to be shared between threads.
  const Tensor a = randn({2, 2}), b = randn({2, 2}).half();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&a, &b] {
      AutocastGuard autocast(kCpu);
      for (int i = 0; i < kOps; ++i) (void)matmul(a, b);
    });
  }
  for (auto& t : threads) t.join();
  const amp::AutocastStats st = amp::autocast_stats();
  EXPECT_EQ(st.ops_of(kFloat16, CastPolicy::LowerPrecision), static_cast<uint64_t>(kThreads * kOps));
  EXPECT_EQ(st.casts, static_cast<uint64_t>(kThreads * kOps));  // one activation cast per call
}


// The scope's exit releases its weight casts in the order they were cached, not in the order of
// the cache's hash map (which changes as it rehashes): a static memory plan needs every step to
// free alike (docs/MEMORY.md, "Training with a plan"). Weight i's cast has 2048 * i bytes.
TEST_F(AutocastScopeTest, ExitReleasesCastsInTheOrderTheyWereCached) {
  std::vector<Tensor> weights;
  for (int64_t i = 1; i <= 48; ++i) weights.push_back(randn({8, 128 * i}, TensorOptions().requires_grad(true)));
  const Tensor x = randn({1, 8});
  for (int round = 0; round < 2; ++round) {  // the second with the map already grown
    const memory::MemoryTrace trace = memory::record_step(Device::cpu(), [&] {
      AutocastGuard autocast(kCpu, kBFloat16);
      for (const Tensor& w : weights) (void)matmul(x, w);  // the cache then holds the only reference
    });
    std::map<int64_t, size_t> requested;  // by buffer id, from its Alloc
    for (const memory::MemoryEvent& e : trace.events)
      if (e.kind == memory::MemoryEvent::Kind::Alloc) requested[e.buffer] = e.requested;
    // The scope's exit is the trace's end: its last events, after the last matmul's temporaries.
    ASSERT_GE(trace.events.size(), weights.size());
    std::vector<size_t> freed;
    for (size_t e = trace.events.size() - weights.size(); e < trace.events.size(); ++e) {
      EXPECT_EQ(trace.events[e].kind, memory::MemoryEvent::Kind::Free);
      freed.push_back(requested[trace.events[e].buffer]);
    }
    std::vector<size_t> cached;
    for (size_t i = 1; i <= weights.size(); ++i) cached.push_back(2048 * i);
    EXPECT_EQ(freed, cached) << "round " << round;
  }
}

}  // namespace
}  // namespace mixtrain::amp_test
