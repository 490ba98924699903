// ZeroRedundancyOptimizer (zero.h): the shard of each rank over DDP's buckets, the shard's
// optimizer, the global gradient norm, the all-gather of the parameters after the update, and the
// optimizer state of the whole model for checkpoints.
#include "mixtrain/distributed/zero.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "backends/reduce.h"
#include "distributed/ddp_reducer.h"
#include "distributed/internal.h"
#include "mixtrain/amp/grad_scaler.h"
#include "mixtrain/base/error.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/io/optimizer_state.h"
#include "mixtrain/ops/functional.h"

namespace mixtrain::distributed {

namespace {

// Chunk `rank` of each bucket (parameters in `order`, sizes `numel`), cut at parameter boundaries.
std::vector<ZeroPiece> pieces_of(const std::vector<std::vector<size_t>>& buckets, const std::vector<int64_t>& numel,
                                 int rank, int world) {
  std::vector<ZeroPiece> out;
  for (size_t b = 0; b < buckets.size(); ++b) {
    int64_t total = 0;
    for (size_t p : buckets[b]) total += numel[p];
    const int64_t chunk = (total + world - 1) / world;
    const int64_t lo = chunk * rank, hi = chunk * (rank + 1);
    int64_t at = 0;
    for (size_t p : buckets[b]) {
      const int64_t begin = std::max(lo, at), end = std::min(hi, at + numel[p]);
      if (begin < end) out.push_back({p, b, begin - at, end - begin, begin});
      at += numel[p];
    }
  }
  return out;
}

}  // namespace

Tensor piece_of(const Tensor& t, const ZeroPiece& piece) { return t.view({-1}).narrow(0, piece.offset, piece.numel); }

std::vector<ZeroPiece> zero_pieces(const std::vector<Tensor>& params, const nn::DistributedDataParallelOptions& options,
                                   int rank, int world) {
  MT_CHECK(world >= 1 && rank >= 0 && rank < world, "zero_pieces: rank ", rank, " is not in a world of ", world);
  std::vector<int64_t> numel;
  for (const Tensor& p : params) numel.push_back(p.numel());
  return pieces_of(nn::ddp_bucket_layout(params, options), numel, rank, world);
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(nn::DistributedDataParallel& ddp, OptimizerFactory make_optimizer)
    : ddp_(ddp), make_optimizer_(std::move(make_optimizer)) {
  MT_CHECK(make_optimizer_ != nullptr, "ZeroRedundancyOptimizer: no optimizer factory");
  MT_CHECK(ddp_.options_.compression() == kFloat32, "ZeroRedundancyOptimizer: DDP's gradient compression (",
           ddp_.options_.compression(), ") is not supported with sharded gradients");
  MT_CHECK(ddp_.module().parameters().size() == ddp_.reducer_->params.size(), "ZeroRedundancyOptimizer: every ",
           "parameter of the module must be trained (some do not require grad); its checkpoints hold the state of ",
           "every parameter");
  build();
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() { ddp_.reducer_->after_reduce = nullptr; }

std::vector<ZeroPiece> ZeroRedundancyOptimizer::pieces_of_rank(int rank) const {
  std::vector<std::vector<size_t>> buckets;
  std::vector<int64_t> numel;
  for (const auto& b : ddp_.reducer_->buckets) buckets.push_back(b.params);
  for (const Tensor& p : params_) numel.push_back(p.numel());
  return pieces_of(buckets, numel, rank, ddp_.group().world_size());
}

void ZeroRedundancyOptimizer::build() {
  auto& reducer = *ddp_.reducer_;
  ProcessGroup& g = ddp_.group();
  reducer.shard(g.world_size(), g.rank());
  params_ = reducer.params;
  pieces_ = pieces_of_rank(g.rank());
  MT_CHECK(!pieces_.empty(), "ZeroRedundancyOptimizer: rank ", g.rank(), " of ", g.world_size(),
           " gets no parameter elements (the model has too few for this many ranks)");
  for (size_t i = 0; i < params_.size(); ++i)
    MT_CHECK(params_[i].is_contiguous(), "ZeroRedundancyOptimizer: parameter ", reducer.names[i], " (",
             params_[i].summary(), ") is not contiguous (channels-last?); its shard is cut from its elements in ",
             "order, so train contiguous parameters (or without ZeRO)");
  NoGradGuard no_grad;
  shard_params_.clear();
  for (const ZeroPiece& piece : pieces_)
    shard_params_.push_back(piece_of(params_[piece.param].detach(), piece));
  optimizer_.reset();  // its state goes before the new one is made
  optimizer_ = make_optimizer_({optim::ParamGroup(shard_params_)});
  MT_CHECK(optimizer_ != nullptr && optimizer_->param_groups().size() == 1, "ZeroRedundancyOptimizer: the factory ",
           "must return an optimizer of one group over the parameters it is given");
  reducer.after_reduce = [this] { set_shard_grads(); };
}

void ZeroRedundancyOptimizer::reshard() { build(); }

int ZeroRedundancyOptimizer::rank() const { return ddp_.group_->rank(); }

ProcessGroup& ZeroRedundancyOptimizer::group() { return ddp_.group(); }

int64_t ZeroRedundancyOptimizer::shard_numel() const {
  int64_t n = 0;
  for (const ZeroPiece& p : pieces_) n += p.numel;
  return n;
}

void ZeroRedundancyOptimizer::set_shard_grads() {
  // The reduced chunk is where the optimizer reads its gradient: no copy.
  for (size_t i = 0; i < pieces_.size(); ++i) {
    const ZeroPiece& p = pieces_[i];
    shard_params_[i].set_grad(ddp_.reducer_->buckets[p.bucket].flat.narrow(0, p.bucket_offset, p.numel));
  }
}

void ZeroRedundancyOptimizer::zero_grad() {
  for (Tensor& p : params_) p.set_grad(Tensor());
  optimizer_->zero_grad();
}

Tensor ZeroRedundancyOptimizer::clip_grad_norm_(double max_norm, double norm_type) {
  MT_CHECK(norm_type > 0.0 && !std::isnan(norm_type), "ZeroRedundancyOptimizer.clip_grad_norm_: norm_type must be > 0 ",
           "or inf, got ", norm_type);
  MT_CHECK(!std::isnan(max_norm) && max_norm >= 0.0, "ZeroRedundancyOptimizer.clip_grad_norm_: max_norm must be ",
           ">= 0, got ", max_norm);
  NoGradGuard no_grad;
  const bool inf = std::isinf(norm_type);
  // After unscale_ a half parameter's unscaled gradient is its master's.
  std::vector<Tensor> grads;
  const std::vector<Tensor> masters = optimizer_->master_params();
  for (size_t i = 0; i < masters.size(); ++i) {
    Tensor g = masters[i].grad();
    if (!g.defined()) g = shard_params_[i].grad();
    if (g.defined()) grads.push_back(g);
  }
  const Device device = params_.front().device();
  // This rank's part (a sum of |g|^p, or the largest |g|), then every rank's combined.
  Tensor part;
  if (device.is_cpu()) {
    double acc = 0.0;
    const Tensor scratch = empty({}, TensorOptions(kFloat64));
    for (const Tensor& g : grads) {
      backends::norm_part(g, g, norm_type, scratch);
      const double v = scratch.item<double>();
      acc = inf ? ((v > acc || v != v) ? v : acc) : acc + v;
    }
    part = full({}, acc, TensorOptions(kFloat64));
  } else {
    part = zeros({}, TensorOptions(kFloat32).device(device));
    for (const Tensor& g_in : grads) {
      const Tensor g = g_in.to(kFloat32);
      const Tensor p = inf ? max(abs(g)) : norm_type == 2.0 ? sum(square(g)) : sum(pow(abs(g), norm_type));
      part = inf ? maximum(part, p) : add(part, p);
    }
  }
  // One scalar of the same dtype on every rank: no need for the cross-rank signature check.
  Tensor total = part.reshape({1});
  UncheckedCollectives::all_reduce_async(ddp_.group(), total, inf ? ReduceOp::Max : ReduceOp::Sum).wait();
  total = total.reshape({});
  if (!inf) total = norm_type == 2.0 ? sqrt(total) : pow(total, 1.0 / norm_type);
  if (device.is_cpu()) {
    const double norm = total.item<double>();
    const double coef = max_norm / (norm + 1e-6);
    if (!(coef >= 1.0))
      for (Tensor& g : grads) g.mul_(coef);
    return full({}, norm, TensorOptions(kFloat32));
  }
  const Tensor coef = minimum(rdiv(add(total, 1e-6), max_norm), full({}, 1.0, TensorOptions(kFloat32).device(device)));
  for (Tensor& g : grads) g.mul_(coef);
  return total;
}

amp::StepOutcome ZeroRedundancyOptimizer::step(amp::GradScaler& scaler) {
  const amp::StepOutcome outcome = scaler.step(*optimizer_);
  gather_parameters();
  return outcome;
}

void ZeroRedundancyOptimizer::step() {
  optimizer_->step();
  gather_parameters();
}

void ZeroRedundancyOptimizer::gather_parameters() {
  NoGradGuard no_grad;
  auto& reducer = *ddp_.reducer_;
  ProcessGroup& g = ddp_.group();
  // The buckets' gradients are spent: each bucket now carries the parameters. This rank's chunk
  // holds its updated shard, and the all-gather fills in every other rank's.
  for (size_t i = 0; i < pieces_.size(); ++i)
    reducer.buckets[pieces_[i].bucket].flat.narrow(0, pieces_[i].bucket_offset, pieces_[i].numel).copy_(shard_params_[i]);
  std::vector<Work> works;
  for (size_t b = 0; b < reducer.buckets.size(); ++b) {
    const Tensor& flat = reducer.buckets[b].flat;
    const int64_t chunk = reducer.chunk_numel(b);
    works.push_back(UncheckedCollectives::all_gather_into_async(g, flat, flat.narrow(0, g.rank() * chunk, chunk)));
  }
  for (Work& w : works) w.wait();
  for (const auto& bucket : reducer.buckets)
    for (size_t j = 0; j < bucket.params.size(); ++j) {
      Tensor p = params_[bucket.params[j]];
      p.view({-1}).copy_(bucket.flat.narrow(0, bucket.offsets[j], p.numel()));
      p.set_grad(Tensor());  // its view now holds parameters, not gradients
    }
}

nlohmann::json ZeroRedundancyOptimizer::consolidated_state_dict() const {
  const nlohmann::json shard = optimizer_->state_dict();
  nlohmann::json group = shard.at("param_groups").at(0);
  nlohmann::json indices = nlohmann::json::array();
  for (size_t i = 0; i < params_.size(); ++i) indices.push_back(i);
  group["params"] = indices;
  // Every parameter takes every step (DDP gives each a gradient), so its pieces' step counts and
  // state tensors agree across ranks: piece 0's stand for all.
  nlohmann::json state = nlohmann::json::object();
  if (shard.at("state").contains("0"))
    for (size_t i = 0; i < params_.size(); ++i) state[std::to_string(i)] = shard.at("state").at("0");
  return {{"type", optimizer_->name()},
          {"param_groups", nlohmann::json::array({group})},
          {"state", state},
          {"steps_taken", shard.at("steps_taken")},
          {"steps_skipped", shard.at("steps_skipped")},
          {"last_step_skipped", shard.at("last_step_skipped")}};
}

io::OptimizerState ZeroRedundancyOptimizer::consolidate_state(int to) {
  NoGradGuard no_grad;
  ProcessGroup& g = ddp_.group();
  MT_CHECK(to >= 0 && to < g.world_size(), "ZeroRedundancyOptimizer.consolidate_state: rank ", to,
           " is not in the group of ", g.world_size());
  auto& reducer = *ddp_.reducer_;
  std::map<std::string, Tensor> tensors;
  for (const auto& [n, t] : optimizer_->state_tensors()) tensors.emplace(n, t);
  io::OptimizerState out;
  out.type = optimizer_->name();
  out.state = consolidated_state_dict();
  std::vector<std::string> names;
  if (out.state.at("state").contains("0"))
    for (const auto& n : out.state.at("state").at("0").at("tensors")) names.push_back(n.get<std::string>());
  if (g.rank() != to) out.state["state"] = nlohmann::json::object();
  // Bucket by bucket and tensor name: this rank's chunk from its pieces, then all-gathered.
  std::map<std::string, Tensor> whole;
  for (const std::string& name : names) {
    const Tensor& like = tensors.at("state.0." + name);
    for (size_t b = 0; b < reducer.buckets.size(); ++b) {
      const auto& bucket = reducer.buckets[b];
      const int64_t chunk = reducer.chunk_numel(b);
      Tensor flat = zeros({bucket.flat.numel()}, like.options());
      for (size_t k = 0; k < pieces_.size(); ++k)
        if (pieces_[k].bucket == b)
          flat.narrow(0, pieces_[k].bucket_offset, pieces_[k].numel).copy_(tensors.at("state." + std::to_string(k) + "." + name));
      g.all_gather_into_tensor(flat, flat.narrow(0, g.rank() * chunk, chunk));
      if (g.rank() != to) continue;
      for (size_t j = 0; j < bucket.params.size(); ++j) {
        const Tensor& p = params_[bucket.params[j]];
        whole["state." + std::to_string(bucket.params[j]) + "." + name] =
            flat.narrow(0, bucket.offsets[j], p.numel()).view(p.shape()).to(Device::cpu()).clone();
      }
    }
  }
  for (auto& [n, t] : whole) out.tensors.emplace_back(n, t);
  return out;
}

namespace {

// A whole-model state cut to this rank's pieces: the state the shard's optimizer loads.
// `stand_ins`: the whole state's tensors are the checker's zero-stride stand-ins (io::
// load_checkpoint's check), so the pieces are stand-ins too, of their own size.
std::pair<nlohmann::json, optim::NamedTensors> shard_of(const io::OptimizerState& whole,
                                                        const std::vector<ZeroPiece>& pieces,
                                                        const std::vector<Tensor>& params, const std::string& type,
                                                        bool stand_ins) {
  const nlohmann::json& s = whole.state;
  MT_CHECK(whole.type == type, "ZeroRedundancyOptimizer: the checkpoint's optimizer is ", whole.type,
           " but this one is ", type);
  MT_CHECK(s.contains("param_groups") && s["param_groups"].is_array() && s["param_groups"].size() == 1,
           "ZeroRedundancyOptimizer: the checkpoint's optimizer has ",
           s.contains("param_groups") && s["param_groups"].is_array() ? s["param_groups"].size() : 0,
           " parameter groups; a sharded optimizer loads one");
  nlohmann::json group = s["param_groups"][0];
  MT_CHECK(group.contains("params") && group["params"].is_array() && group["params"].size() == params.size(),
           "ZeroRedundancyOptimizer: the checkpoint's optimizer covers ",
           group.contains("params") && group["params"].is_array() ? group["params"].size() : 0,
           " parameters; the model trains ", params.size());
  nlohmann::json indices = nlohmann::json::array();
  for (size_t k = 0; k < pieces.size(); ++k) indices.push_back(k);
  group["params"] = indices;
  std::map<std::string, Tensor> by_name;
  for (const auto& [n, t] : whole.tensors) by_name.emplace(n, t);
  nlohmann::json state = nlohmann::json::object();
  optim::NamedTensors tensors;
  const nlohmann::json& saved = s.contains("state") ? s["state"] : nlohmann::json::object();
  for (size_t k = 0; k < pieces.size(); ++k) {
    const std::string key = std::to_string(pieces[k].param);
    if (!saved.is_object() || !saved.contains(key)) continue;
    const nlohmann::json& entry = saved[key];
    state[std::to_string(k)] = entry;
    if (!entry.is_object() || !entry.contains("tensors") || !entry["tensors"].is_array()) continue;
    for (const auto& n : entry["tensors"]) {
      if (!n.is_string()) continue;  // the shard's optimizer names what is wrong
      auto it = by_name.find("state." + key + "." + n.get<std::string>());
      if (it == by_name.end()) continue;
      const Tensor& t = it->second;
      const Tensor& p = params[pieces[k].param];
      MT_CHECK(t.shape() == p.shape(), "ZeroRedundancyOptimizer: the checkpoint's tensor ", it->first, " is ",
               shape_str(t.shape()), " but parameter ", pieces[k].param, " is ", shape_str(p.shape()));
      const Tensor piece = stand_ins ? zeros({}, TensorOptions(t.dtype())).expand({pieces[k].numel})
                                     : piece_of(t.contiguous(), pieces[k]);
      tensors.emplace_back("state." + std::to_string(k) + "." + n.get<std::string>(), piece);
    }
  }
  nlohmann::json out = s;
  out["param_groups"] = nlohmann::json::array({group});
  out["state"] = state;
  return {out, tensors};
}

}  // namespace

void ZeroRedundancyOptimizer::check_consolidated_state(const io::OptimizerState& state) const {
  const auto [json, tensors] = shard_of(state, pieces_, params_, optimizer_->name(), true);
  optimizer_->validate_state_dict(json, tensors);
}

void ZeroRedundancyOptimizer::load_consolidated_state(const io::OptimizerState& state) {
  const auto [json, tensors] = shard_of(state, pieces_, params_, optimizer_->name(), false);
  optimizer_->load_state_dict(json, tensors);
}

io::ShardLayout ZeroRedundancyOptimizer::shard_layout() const {
  io::ShardLayout out;
  out.param_names = ddp_.reducer_->names;
  for (const Tensor& p : params_) out.param_shapes.push_back(p.shape());
  for (int r = 0; r < ddp_.group().world_size(); ++r) {
    out.ranks.emplace_back();
    for (const ZeroPiece& p : pieces_of_rank(r)) out.ranks.back().push_back({p.param, p.offset, p.numel});
  }
  return out;
}

io::OptimizerPieces ZeroRedundancyOptimizer::state_pieces() {
  io::OptimizerPieces out;
  for (const ZeroPiece& p : pieces_) out.pieces.push_back({p.param, p.offset, p.numel});
  out.check = [this](const io::OptimizerState& whole) { check_consolidated_state(whole); };
  // The checkpoint's bytes are read into the optimizer's state afterwards: stand-ins are enough.
  out.apply = [this](const io::OptimizerState& whole) {
    const auto [json, tensors] = shard_of(whole, pieces_, params_, optimizer_->name(), true);
    optimizer_->load_state_dict(json, tensors);
    return optimizer_->state_tensors();
  };
  return out;
}

}  // namespace mixtrain::distributed
