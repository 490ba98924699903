// memory::dry_run: a training step run on meta tensors predicts the CPU caching allocator's peak
// allocated bytes of the same real step; the trace's events carry roles, phases and ops; views
// add no event; values cannot be read from meta tensors.
#include <cstdio>
#include <optional>

#include "mixtrain/memory/caching_allocator.h"
#include "mixtrain/memory/dry_run.h"
#include "mixtrain/mixtrain.h"
#include "support/testing.h"

namespace mt = mixtrain;
namespace mem = mixtrain::memory;
using mt::Tensor;

namespace {

constexpr int64_t kBatch = 512, kIn = 96, kHidden = 256, kClasses = 10;

mt::nn::Sequential make_mlp() {
  mt::manual_seed(3);
  return mt::nn::Sequential(mt::nn::Linear(kIn, kHidden), mt::nn::ReLU(), mt::nn::Linear(kHidden, kHidden),
                            mt::nn::ReLU(), mt::nn::Linear(kHidden, kClasses));
}

struct Precision {
  const char* name;
  bool autocast;
  mt::DType dtype;
  bool scaler;  // fp16 trains with a GradScaler, as a real fp16 run does
};

// One training step: forward (under autocast when asked), backward, gradient clipping, Adam step.
void train_step(mt::nn::Sequential& model, mt::optim::Adam& opt, std::optional<mt::amp::GradScaler>& scaler,
                const Tensor& x, const Tensor& y, const Precision& p) {
  opt.zero_grad();
  Tensor loss;
  {
    std::optional<mt::amp::AutocastGuard> autocast;
    if (p.autocast) autocast.emplace(mt::DeviceType::CPU, p.dtype);
    loss = mt::nn::functional::cross_entropy(model->forward(x), y);
  }
  // As the example trainers do: unscale, clip, step.
  if (scaler) {
    scaler->scale(loss).backward();
    scaler->unscale_(opt);
  } else {
    loss.backward();
  }
  mt::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
  if (scaler) {
    scaler->step(opt);
    scaler->update();
  } else {
    opt.step();
  }
}

// Only a run that uses one has a scaler: its state is four scalars on the loss's device.
std::optional<mt::amp::GradScaler> make_scaler(const Precision& p) {
  std::optional<mt::amp::GradScaler> s;
  if (p.scaler) s.emplace();
  return s;
}

// The CPU allocator's peak allocated bytes during one real step, counting only what this step's
// model, optimizer and batch hold (what else the process holds is subtracted).
int64_t measured_peak(const Precision& p) {
  const int64_t before = mem::stats(mt::Device::cpu()).allocated_bytes;
  int64_t peak = 0;
  {
    mt::nn::Sequential model = make_mlp();
    mt::optim::Adam opt(model->parameters(), mt::optim::AdamOptions(1e-3));
    std::optional<mt::amp::GradScaler> scaler = make_scaler(p);
    const Tensor x = mt::randn({kBatch, kIn});
    const Tensor y = mt::randint(0, kClasses, {kBatch});
    mem::reset_peak_stats(mt::Device::cpu());
    train_step(model, opt, scaler, x, y, p);
    peak = mem::stats(mt::Device::cpu()).peak_allocated_bytes - before;
  }
  return peak;
}

mem::MemoryTrace dry_run_step(const Precision& p, mt::Device target = mt::Device::cpu()) {
  mt::nn::Sequential model = make_mlp();
  model->to(mt::Device::meta());
  mt::optim::Adam opt(model->parameters(), mt::optim::AdamOptions(1e-3));
  std::optional<mt::amp::GradScaler> scaler = make_scaler(p);
  const Tensor x = mt::empty({kBatch, kIn}, mt::TensorOptions().device(mt::Device::meta()));
  const Tensor y = mt::empty({kBatch}, mt::TensorOptions(mt::kInt64).device(mt::Device::meta()));
  return mem::dry_run(target, [&] { train_step(model, opt, scaler, x, y, p); });
}

const Precision kPrecisions[] = {
    {"fp32", false, mt::kFloat32, false},
    {"bf16", true, mt::kBFloat16, false},
    {"fp16", true, mt::kFloat16, true},
};

int64_t role_bytes(const std::array<int64_t, mem::kNumRoles>& a, mem::Role r) { return a[static_cast<int>(r)]; }

}  // namespace

TEST(DryRun, MlpStepPeakIsWithinOnePercentOfTheMeasuredCpuPeak) {
  for (const Precision& p : kPrecisions) {
    SCOPED_TRACE(p.name);
    const int64_t real = measured_peak(p);
    const mem::MemoryTrace trace = dry_run_step(p);
    const int64_t predicted = trace.peak_bytes();
    std::printf("MLP %ldx%ld-%ld-%ld-%ld step, %s: predicted peak %ld bytes, measured %ld bytes (%.3f%%), "
                "persistent %ld, %zu events\n",
                static_cast<long>(kBatch), static_cast<long>(kIn), static_cast<long>(kHidden),
                static_cast<long>(kHidden), static_cast<long>(kClasses), p.name, static_cast<long>(predicted),
                static_cast<long>(real), 100.0 * static_cast<double>(predicted - real) / static_cast<double>(real),
                static_cast<long>(trace.persistent_bytes()), trace.events.size());
    ASSERT_GT(real, 0);
    EXPECT_NEAR(static_cast<double>(predicted), static_cast<double>(real), 0.01 * static_cast<double>(real));
  }
}

TEST(DryRun, EventsCarryRolesPhasesAndOps) {
  const mem::MemoryTrace trace = dry_run_step(kPrecisions[2]);  // fp16 + scaler: every phase, casts
  ASSERT_FALSE(trace.events.empty());
  // Before the step: the parameters (Module::to tags them) and the batch.
  const int64_t params = (kIn * kHidden + kHidden + kHidden * kHidden + kHidden + kHidden * kClasses + kClasses) * 4;
  int64_t before_params = 0, before_inputs = 0;
  for (const mem::MemoryEvent& e : trace.events) {
    if (!e.before_step) continue;
    if (e.role == mem::Role::Parameter) before_params += static_cast<int64_t>(e.requested);
    if (e.role == mem::Role::Input) before_inputs += static_cast<int64_t>(e.requested);
  }
  EXPECT_EQ(before_params, params);
  EXPECT_EQ(before_inputs, kBatch * kIn * 4 + kBatch * 8);
  const auto by_role = trace.allocated_by_role();
  // Adam's two moments per parameter (plus its step counters) and one gradient per parameter.
  EXPECT_GE(role_bytes(by_role, mem::Role::OptimizerState), 2 * params);
  EXPECT_GE(role_bytes(by_role, mem::Role::Gradient), params);
  EXPECT_GT(role_bytes(by_role, mem::Role::Activation), 0);
  EXPECT_GT(role_bytes(by_role, mem::Role::Temporary), 0);
  // The CPU's fp16 GEMM works on fp32 copies: workspace, all of it freed within the step.
  EXPECT_GT(role_bytes(by_role, mem::Role::Workspace), 0);
  EXPECT_EQ(role_bytes(trace.peak_by_role(), mem::Role::Workspace) % 512, 0);
  const auto by_phase = trace.allocated_by_phase();
  for (int ph = 0; ph < mem::kNumPhases; ++ph) EXPECT_GT(by_phase[static_cast<size_t>(ph)], 0) << ph;
  bool linear_fwd = false, backward_node = false, fp16_cast = false;
  for (const mem::MemoryEvent& e : trace.events) {
    if (e.kind != mem::MemoryEvent::Kind::Alloc) continue;
    const std::string op = e.op;
    linear_fwd |= e.phase == mem::Phase::Forward && op == "linear";
    backward_node |= e.phase == mem::Phase::Backward && op.find("Backward") != std::string::npos;
    fp16_cast |= op == "linear" && e.requested == static_cast<size_t>(kHidden * kHidden * 2);  // a cached weight cast
    EXPECT_EQ(e.bytes, mem::CachingAllocator::round_size(e.requested));
  }
  EXPECT_TRUE(linear_fwd);
  EXPECT_TRUE(backward_node);
  EXPECT_TRUE(fp16_cast);
  // Every in-step lifetime is well formed, and persistent + in-step account for the peak's parts.
  for (const mem::BufferLifetime& b : trace.lifetimes()) {
    EXPECT_LT(b.alloc_at, b.free_at);
    EXPECT_EQ(trace.events[static_cast<size_t>(b.alloc_at)].kind, mem::MemoryEvent::Kind::Alloc);
    EXPECT_EQ(trace.events[static_cast<size_t>(b.free_at)].kind, mem::MemoryEvent::Kind::Free);
  }
  EXPECT_LE(trace.in_step_peak_bytes(), trace.peak_bytes());
  EXPECT_GE(trace.persistent_bytes(), params + 3 * params);  // parameters, gradients, two moments
  // The scaler's skip decision read no value: the trace says which path was assumed.
  EXPECT_FALSE(trace.assumptions.empty()) << "the meta step read found_inf without saying so";
}

TEST(DryRun, ACudaTargetAddsTheCublasWorkspaceOnce) {
  const mem::MemoryTrace cpu = dry_run_step(kPrecisions[0], mt::Device::cpu());
  const mem::MemoryTrace cuda = dry_run_step(kPrecisions[0], mt::Device::cuda(0));
  const auto ws = cuda.allocated_by_role()[static_cast<int>(mem::Role::Workspace)];
  EXPECT_GE(ws, int64_t{32} << 20);  // cuBLASLt's workspace, held by the CUDA context
  EXPECT_LT(ws, (int64_t{32} << 20) + 8192);  // plus the loss kernels' small scratch
  EXPECT_EQ(cuda.persistent_bytes() - cpu.persistent_bytes(), int64_t{32} << 20);
}

TEST(DryRun, ViewsShareStorageAndAddNoEvent) {
  const Tensor x = mt::empty({8, 6}, mt::TensorOptions().device(mt::Device::meta()));
  const mem::MemoryTrace trace = mem::dry_run(mt::Device::cpu(), [&] {
    Tensor v = x.reshape({6, 8}).transpose(0, 1).flatten();  // transpose then flatten copies once
    Tensor n = x.narrow(0, 1, 4);
    Tensor r = x.reshape({48});
    (void)n;
    (void)r;
    (void)v;
  });
  int64_t in_step_allocs = 0;
  for (const mem::MemoryEvent& e : trace.events)
    in_step_allocs += e.kind == mem::MemoryEvent::Kind::Alloc && !e.before_step;
  EXPECT_EQ(in_step_allocs, 1);  // only flatten of the non-contiguous transpose copied
}

TEST(DryRun, AThrowingStepStopsTheRecordingAndDryRunsDoNotNest) {
  mt::testing::expect_error([] { mem::dry_run(mt::Device::cpu(), [] { throw mt::Error("boom"); }); }, "boom");
  EXPECT_FALSE(mem::recording());
  mt::testing::expect_error(
      [] { mem::dry_run(mt::Device::cpu(), [] { mem::dry_run(mt::Device::cpu(), [] {}); }); }, "do not nest");
  mt::testing::expect_error([] { mem::dry_run(mt::Device::meta(), [] {}); }, "cpu or cuda");
  mt::testing::expect_error([] { (void)mem::stats(mt::Device::meta()); }, {"meta device has no allocator"});
}

TEST(DryRun, TheMetaStepAllocatesWhatTheRealStepAllocatesInTheSameOrder) {
  // fp32 and bf16 (fp16's scaler moves its state to meta inside the dry run, four extra events).
  for (const Precision& p : {kPrecisions[0], kPrecisions[1]}) {
    SCOPED_TRACE(p.name);
    mt::nn::Sequential model = make_mlp();
    mt::optim::Adam opt(model->parameters(), mt::optim::AdamOptions(1e-3));
    std::optional<mt::amp::GradScaler> scaler = make_scaler(p);
    const Tensor x = mt::randn({kBatch, kIn});
    const Tensor y = mt::randint(0, kClasses, {kBatch});
    const mem::MemoryTrace real =
        mem::record_step(mt::Device::cpu(), [&] { train_step(model, opt, scaler, x, y, p); });
    const mem::MemoryTrace dry = dry_run_step(p);
    std::vector<std::pair<mem::MemoryEvent::Kind, size_t>> a, b;
    for (const mem::MemoryEvent& e : real.events) a.emplace_back(e.kind, e.bytes);
    for (const mem::MemoryEvent& e : dry.events)
      if (!e.before_step) b.emplace_back(e.kind, e.bytes);
    EXPECT_EQ(a, b);
    EXPECT_EQ(real.lifetimes().size(), dry.lifetimes().size());
    EXPECT_GT(real.lifetimes().size(), 10u);
  }
}
