// DistributedDataParallel: construction (model check, rank 0's state to everyone), the per-step
// batch exchange that weights each rank's gradient, buffer broadcast, AMP agreement and join.
#include <chrono>
#include <cmath>
#include <sstream>

#include "distributed/ddp_reducer.h"
#include "distributed/internal.h"
#include "mixtrain/amp/fp8.h"
#include "mixtrain/amp/grad_scaler.h"
#include "mixtrain/base/error.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/distributed/ddp.h"
#include "mixtrain/distributed/rank_balancer.h"

namespace mixtrain::nn {

namespace {

uint64_t fnv(uint64_t h, const std::string& s) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Counts and a hash of names, shapes and dtypes: equal on every rank iff the models match.
std::vector<int64_t> model_signature(const Module& m) {
  int64_t numel = 0;
  uint64_t h = 1469598103934665603ull;
  const auto params = m.named_parameters();
  const auto buffers = m.named_buffers();
  for (const auto* list : {&params, &buffers})
    for (const auto& [name, t] : *list) {
      std::ostringstream os;
      os << name << shape_str(t.shape()) << t.dtype();
      h = fnv(h, os.str());
      numel += t.numel();
    }
  return {static_cast<int64_t>(params.size()), static_cast<int64_t>(buffers.size()), numel,
          static_cast<int64_t>(h >> 1)};
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<Module> module,
                                                 std::shared_ptr<distributed::ProcessGroup> group,
                                                 const DistributedDataParallelOptions& options)
    : module_(std::move(module)), group_(std::move(group)), options_(options) {
  MT_CHECK(module_ != nullptr, "DistributedDataParallel: null module");
  if (!group_) {
    MT_CHECK(distributed::is_initialized(), "DistributedDataParallel: no process group given and none ",
             "initialised; call distributed::init_process_group() first");
    // The default group lives until destroy_process_group; share it without owning it.
    group_ = std::shared_ptr<distributed::ProcessGroup>(&distributed::default_group(), [](auto*) {});
  }
  MT_CHECK(options_.bucket_cap_mb() > 0 && options_.first_bucket_mb() > 0,
           "DistributedDataParallel: bucket sizes must be positive");
  const DType c = options_.compression();
  MT_CHECK(c == kFloat32 || c == kFloat16 || c == kBFloat16, "DistributedDataParallel: compression must be ",
           "float32 (none), float16 or bfloat16, got ", c);
  if (options_.init_sync()) {
    check_models_match();
    broadcast_state();
  }
  reducer_ = std::make_unique<Reducer>(*this, module_->named_parameters());
  weight_ = 1.0 / group_->world_size();
  hook_group_ = std::make_shared<std::shared_ptr<distributed::ProcessGroup>>(group_);
  follow_rank_shares();
}

void DistributedDataParallel::follow_rank_shares() {
  balancer_.reset();
  timing_work_ = distributed::Work();  // of an old group, which failed or was replaced: not waited for
  measured_ = false;
  const distributed::RankShares shares = group_->rank_shares();
  if (!shares.adaptive || group_->world_size() <= 1) return;
  // On CUDA the host runs ahead of the device, and NCCL shares the compute stream, so host time
  // to the end of backward is not the device's compute time (that needs CUDA events).
  for (const Tensor& p : module_->parameters())
    MT_CHECK(!p.device().is_cuda(), "--rank-weights adaptive (MIXTRAIN_RANK_WEIGHTS=adaptive) times each rank's ",
             "compute on the host, which measures CPU ranks only, not ", p.device().str(), "; give fixed shares ",
             "with --rank-weights W0,W1,... or size them by memory with --rank-batches auto");
  balancer_ = std::make_unique<distributed::RankBalancer>(shares.weights_for(group_->world_size()));
}

void DistributedDataParallel::set_process_group(std::shared_ptr<distributed::ProcessGroup> group) {
  MT_CHECK(group != nullptr, "DistributedDataParallel.set_process_group: null group");
  group_ = std::move(group);
  *hook_group_ = group_;
  reducer_->reset();
  weight_ = 1.0 / group_->world_size();
  global_batch_ = 0;
  follow_rank_shares();
}

DistributedDataParallel::~DistributedDataParallel() = default;

std::function<void(Tensor&)> DistributedDataParallel::max_over_current_group() const {
  // The cell, not the group: after set_process_group (an elastic job's next generation) the hook
  // reduces over the new group, never over the old one, which failed or was replaced.
  auto cell = hook_group_;
  return [cell](Tensor& t) {
    distributed::ProcessGroup& group = **cell;
    if (group.world_size() > 1) group.all_reduce(t, distributed::ReduceOp::Max);
  };
}

void DistributedDataParallel::check_models_match() {
  const std::vector<int64_t> sig = model_signature(*module_);
  const Tensor mine = from_vector(sig, {static_cast<int64_t>(sig.size())}, TensorOptions(kInt64));
  const std::vector<Tensor> all = group_->all_gather(mine);
  const std::vector<int64_t> ref = all[0].to_vector<int64_t>();
  for (size_t r = 1; r < all.size(); ++r) {
    const std::vector<int64_t> v = all[r].to_vector<int64_t>();
    if (v == ref) continue;
    MT_ERROR("DistributedDataParallel: rank ", r, "'s model differs from rank 0's: ", v[0], " parameters and ",
             v[1], " buffers with ", v[2], " elements in all, against ", ref[0], " and ", ref[1], " with ", ref[2],
             v[0] == ref[0] && v[1] == ref[1] && v[2] == ref[2] ? " (same counts: a name, shape or dtype differs)"
                                                                   : "",
             ". Every rank must build the same model");
  }
}

void DistributedDataParallel::broadcast_state() {
  NoGradGuard no_grad;
  std::vector<distributed::Work> works;
  for (Tensor t : module_->parameters()) works.push_back(group_->broadcast_async(t, 0));
  for (Tensor t : module_->buffers()) works.push_back(group_->broadcast_async(t, 0));
  for (auto& w : works) w.wait();
}

void DistributedDataParallel::exchange_batch(int64_t local_batch) {
  Tensor n = full({1}, static_cast<double>(local_batch), TensorOptions(kInt64));
  const auto t0 = std::chrono::steady_clock::now();
  if (group_->world_size() > 1) group_->all_reduce(n);
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  global_batch_ = n.to_vector<int64_t>()[0];
}

void DistributedDataParallel::prepare_forward(int64_t local_batch) {
  if (!autograd::is_grad_enabled()) return;  // evaluation: no backward, nothing to reduce
  step_start_ = std::chrono::steady_clock::now();
  reducer_->prepare();
  wait_seconds_ = 0;
  loss_scaled_ = false;
  if (options_.broadcast_buffers() && group_->world_size() > 1) {
    NoGradGuard no_grad;
    std::vector<distributed::Work> works;
    for (Tensor t : module_->buffers())
      works.push_back(distributed::UncheckedCollectives::broadcast_async(*group_, t, 0));
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& w : works) w.wait();
    wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (balancer_) send_step_timing();
  ++steps_;
  if (local_batch >= 0) set_local_batch(local_batch);
}

void DistributedDataParallel::send_step_timing() {
  if (timing_work_.valid()) observe_step_timing();  // sent before a backward that never reduced (no_sync)
  const int world = group_->world_size(), rank = group_->rank();
  std::vector<double> mine(2 * static_cast<size_t>(world), 0.0);
  // The first step (and a joined rank) has nothing to report: zero rows, which the balancer skips.
  if (measured_) {
    mine[static_cast<size_t>(rank)] = static_cast<double>(local_rows_);
    mine[static_cast<size_t>(world + rank)] = compute_seconds_;
    measured_ = false;
  }
  timing_ = from_vector(mine, {2 * world}, TensorOptions(kFloat64));
  timing_work_ = distributed::UncheckedCollectives::all_reduce_async(*group_, timing_);
}

void DistributedDataParallel::observe_step_timing() {
  timing_work_.wait();
  timing_work_ = distributed::Work();
  // Each slot is a sum with one non-zero term, so every rank reads the same numbers and its
  // balancer reaches the same shares.
  const std::vector<double> v = timing_.to_vector<double>();
  const size_t world = v.size() / 2;
  std::vector<int64_t> rows(world);
  for (size_t r = 0; r < world; ++r) rows[r] = std::llround(v[r]);
  if (!balancer_->observe(rows, std::vector<double>(v.begin() + static_cast<std::ptrdiff_t>(world), v.end()))) return;
  distributed::RankShares shares = group_->rank_shares();
  shares.weights = balancer_->weights();
  ++shares.changes;
  group_->set_rank_shares(std::move(shares));
}

void DistributedDataParallel::end_of_backward() {
  compute_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start_).count() - wait_seconds_;
  measured_ = true;
  if (balancer_ && timing_work_.valid()) observe_step_timing();
}

void DistributedDataParallel::set_local_batch(int64_t local_batch) {
  MT_CHECK(local_batch >= 0, "DistributedDataParallel: negative batch size ", local_batch);
  exchange_batch(local_batch);
  MT_CHECK(global_batch_ > 0, "DistributedDataParallel: every rank's batch is empty");
  set_weight(local_batch);
}

void DistributedDataParallel::set_local_batch(int64_t local_batch, int64_t global_batch) {
  MT_CHECK(local_batch >= 0 && global_batch > 0 && local_batch <= global_batch,
           "DistributedDataParallel.set_local_batch: this rank's batch of ", local_batch,
           " rows must be part of a non-empty global batch, got ", global_batch);
  global_batch_ = global_batch;
  set_weight(local_batch);
}

void DistributedDataParallel::set_weight(int64_t local_batch) {
  local_rows_ = local_batch;
  weight_ = options_.weight_by_batch() ? static_cast<double>(local_batch) / static_cast<double>(global_batch_)
                                       : 1.0 / group_->world_size();
}

void DistributedDataParallel::after_forward(const Tensor& output) {
  if (autograd::is_grad_enabled() && options_.find_unused_parameters()) reducer_->mark_unused(output);
}

Tensor DistributedDataParallel::scale_loss(const Tensor& loss) {
  MT_CHECK(loss.defined(), "DistributedDataParallel.scale_loss: undefined loss");
  loss_scaled_ = true;
  // At world size 1 the share is exactly 1: no arithmetic, so training stays bit-identical to
  // training without DDP.
  if (weight_ == 1.0) return loss;
  return loss * weight_;
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  prepare_forward(input.dim() > 0 ? input.size(0) : 1);
  Tensor out = module_->forward(input);
  after_forward(out);
  return out;
}

void DistributedDataParallel::sync_grad_scaler(amp::GradScaler& scaler) {
  scaler.set_found_inf_hook(max_over_current_group());
  scaler_synced_ = true;
}

void DistributedDataParallel::sync_fp8(amp::Fp8Scaling& fp8) {
  fp8.set_amax_reduce_hook(max_over_current_group());
  fp8_layers_ = static_cast<int64_t>(fp8.num_layers());
}

int64_t DistributedDataParallel::join() {
  int64_t shadowed = 0;
  // The same collectives, in the same order, as a step of the ranks still training.
  for (;;) {
    if (options_.broadcast_buffers() && group_->world_size() > 1) {
      NoGradGuard no_grad;
      for (Tensor t : module_->buffers()) distributed::UncheckedCollectives::broadcast_async(*group_, t, 0).wait();
    }
    if (balancer_) {
      measured_ = false;  // no rows of its own to report
      send_step_timing();
      observe_step_timing();
    }
    exchange_batch(0);
    if (global_batch_ == 0) break;  // every rank has joined
    reducer_->shadow_backward();
    if (scaler_synced_) {
      // The scaler's flag: a float32 scalar on the parameters' device (the same collective).
      const auto params = module_->parameters();
      Tensor f = zeros({}, TensorOptions(kFloat32).device(params.empty() ? Device::cpu() : params[0].device()));
      group_->all_reduce(f, distributed::ReduceOp::Max);
    }
    if (fp8_layers_ > 0) {
      // Fp8Scaling::update()'s amaxes, after the optimizer step (zeros: this rank saw nothing).
      const auto params = module_->parameters();
      Tensor a = zeros({fp8_layers_, 3}, TensorOptions(kFloat32).device(params.empty() ? Device::cpu() : params[0].device()));
      group_->all_reduce(a, distributed::ReduceOp::Max);
    }
    ++shadowed;
  }
  // The replicas of ranks that stopped early missed updates: the one that ran longest sends its
  // parameters and buffers to all (ties: the lowest rank).
  const Tensor mine = full({1}, static_cast<double>(steps_), TensorOptions(kInt64));
  const std::vector<Tensor> all = group_->all_gather(mine);
  int src = 0;
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r].to_vector<int64_t>()[0] > all[static_cast<size_t>(src)].to_vector<int64_t>()[0])
      src = static_cast<int>(r);
  NoGradGuard no_grad;
  for (Tensor t : module_->parameters()) group_->broadcast(t, src);
  for (Tensor t : module_->buffers()) group_->broadcast(t, src);
  return shadowed;
}

int64_t DistributedDataParallel::num_buckets() const { return static_cast<int64_t>(reducer_->buckets.size()); }

std::vector<std::vector<size_t>> DistributedDataParallel::bucket_assignment() const {
  std::vector<std::vector<size_t>> out;
  for (const auto& b : reducer_->buckets) out.push_back(b.params);
  return out;
}

}  // namespace mixtrain::nn
