// What a member of an elastic job sends to a joiner or to a member a step behind: a JSON header
// (steps, the optimizer's, scaler's and scheduler's state, the generator, the trainer's extra, and
// the names, dtypes and shapes of the optimizer's tensors), then every parameter, buffer and
// optimizer tensor, each broadcast in place. Also MembershipChange::describe and the kill hook.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "distributed/elastic_internal.h"
#include "mixtrain/amp/grad_scaler.h"
#include "mixtrain/base/error.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/base/rng.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/nn/module.h"
#include "mixtrain/optim/lr_scheduler.h"
#include "mixtrain/optim/optimizer.h"

namespace mixtrain::distributed {

namespace {

// Bytes from `root` to every rank: the length, then the bytes in int64 words.
std::string broadcast_text(ProcessGroup& g, const std::string& text, int root) {
  Tensor n = full({1}, static_cast<double>(text.size()), TensorOptions(kInt64));
  g.broadcast(n, root);
  const int64_t size = n.to_vector<int64_t>()[0];
  Tensor words = zeros({(size + 7) / 8}, TensorOptions(kInt64));
  if (g.rank() == root && size > 0) std::memcpy(words.raw_data(), text.data(), text.size());
  g.broadcast(words, root);
  return std::string(static_cast<const char*>(words.raw_data()), static_cast<size_t>(size));
}

nlohmann::json header_of(const ElasticState& s, int64_t steps) {
  nlohmann::json h = {{"steps", steps}};
  if (s.optimizer) {
    h["optimizer"] = s.optimizer->state_dict();
    nlohmann::json tensors = nlohmann::json::array();
    for (const auto& [name, t] : s.optimizer->state_tensors())
      tensors.push_back({{"name", name}, {"dtype", static_cast<int>(t.dtype())}, {"shape", t.shape()}});
    h["optimizer_tensors"] = tensors;
  }
  if (s.scaler) h["scaler"] = s.scaler->state_dict();
  if (s.scheduler) h["scheduler"] = s.scheduler->state_dict();
  const GeneratorState rng = default_generator().state();
  h["rng"] = {{"seed", rng.seed}, {"offset", rng.offset}};
  if (s.save_extra) h["extra"] = s.save_extra();
  return h;
}

// The parameters, buffers and optimizer tensors from `src` by broadcast (every rank takes part),
// and, when `take`, the header's optimizer, scaler, scheduler, generator and extra state.
void receive_state(ProcessGroup& g, const ElasticState& s, const nlohmann::json& h, int src, bool take) {
  NoGradGuard no_grad;
  if (s.module) {
    for (Tensor t : s.module->parameters()) g.broadcast(t, src);
    for (Tensor t : s.module->buffers()) g.broadcast(t, src);
  }
  if (s.optimizer) {
    if (take) {
      // The sender's state with zero-stride stand-ins of its tensors: load_state_dict creates the
      // tensors, then they are filled by broadcast.
      optim::NamedTensors stand_ins;
      for (const auto& t : h.at("optimizer_tensors"))
        stand_ins.emplace_back(t.at("name").get<std::string>(),
                               zeros({}, TensorOptions(static_cast<DType>(t.at("dtype").get<int>())))
                                   .expand(t.at("shape").get<std::vector<int64_t>>()));
      s.optimizer->load_state_dict(h.at("optimizer"), stand_ins);
    }
    std::map<std::string, Tensor> live;
    for (const auto& [name, t] : s.optimizer->state_tensors()) live.emplace(name, t);
    for (const auto& t : h.at("optimizer_tensors")) {
      auto it = live.find(t.at("name").get<std::string>());
      MT_CHECK(it != live.end(), "elastic: rank ", g.rank(), "'s optimizer has no state tensor ",
               t.at("name").get<std::string>(), " though it completed as many steps as rank ", src);
      g.broadcast(it->second, src);
    }
  }
  if (!take) return;
  if (s.scaler && h.contains("scaler")) s.scaler->load_state_dict(h.at("scaler"));
  if (s.scheduler && h.contains("scheduler")) s.scheduler->load_state_dict(h.at("scheduler"));
  default_generator().set_state({h.at("rng").at("seed").get<uint64_t>(), h.at("rng").at("offset").get<uint64_t>()});
  if (s.load_extra && h.contains("extra")) s.load_extra(h.at("extra"));
}

}  // namespace

bool sync_state(ProcessGroup& g, const ElasticState& s, int64_t& steps) {
  const Tensor mine = full({1}, static_cast<double>(steps), TensorOptions(kInt64));
  const std::vector<Tensor> all = g.all_gather(mine);
  int src = 0;
  int64_t newest = all[0].to_vector<int64_t>()[0];
  bool differ = false;
  for (size_t r = 1; r < all.size(); ++r) {
    const int64_t v = all[r].to_vector<int64_t>()[0];
    differ = differ || v != newest;
    if (v > newest) newest = v, src = static_cast<int>(r);
  }
  if (!differ) return false;
  const bool take = steps < newest;
  const std::string text = broadcast_text(g, g.rank() == src ? header_of(s, steps).dump() : std::string(), src);
  try {
    receive_state(g, s, nlohmann::json::parse(text), src, take);
  } catch (const nlohmann::json::exception& e) {
    // A sender of another build (or a corrupted broadcast): an Error naming it, not nlohmann's.
    MT_ERROR("elastic: the state header rank ", src, " sent (", text.size(), " bytes) is malformed: ", e.what());
  }
  if (!take) return false;
  steps = newest;
  return true;
}

std::string MembershipChange::describe() const {
  std::ostringstream os;
  os << "generation " << generation << " at step " << step << ": ";
  if (cause == "join") {
    os << joined.size() << " joined (";
    for (size_t i = 0; i < joined.size(); ++i) os << (i ? ", " : "") << joined[i];
    os << ")";
  } else {
    os << "lost ";
    for (size_t i = 0; i < lost.size(); ++i) os << (i ? ", " : "") << lost[i];
    if (lost.empty()) os << "none";
    if (!reason.empty()) os << " (" << reason.substr(0, 160) << (reason.size() > 160 ? "..." : "") << ")";
  }
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%.2f", seconds_lost);
  os << "; " << world_before << " -> " << world_after << " ranks; " << secs << " s lost";
  if (cause != "join") os << (redo ? "; the step is redone" : "; no step to redo");
  return os.str();
}

void kill_if_asked(int64_t step) {
  static const std::vector<std::vector<int64_t>> points = [] {
    std::vector<std::vector<int64_t>> out;
    const char* v = std::getenv("MIXTRAIN_TEST_KILL");
    if (!v || !*v) return out;
    std::stringstream list(v);
    for (std::string item; std::getline(list, item, ',');) {
      std::vector<int64_t> fields;
      std::stringstream parts(item);
      for (std::string f; std::getline(parts, f, ':');) {
        char* end = nullptr;
        const long long x = std::strtoll(f.c_str(), &end, 10);
        MT_CHECK(!f.empty() && end && *end == '\0' && x >= 0, "MIXTRAIN_TEST_KILL=\"", v, "\": '", item,
                 "' is not RANK:STEP[:RESTART]");
        fields.push_back(x);
      }
      MT_CHECK(fields.size() == 2 || fields.size() == 3, "MIXTRAIN_TEST_KILL=\"", v, "\": '", item,
               "' is not RANK:STEP[:RESTART]");
      if (fields.size() == 2) fields.push_back(0);
      out.push_back(fields);
    }
    return out;
  }();
  if (points.empty()) return;
  const LaunchEnv e = read_launch_env();
  if (e.elastic_join) return;  // a joiner's RANK is a placeholder
  for (const auto& p : points)
    if (p[0] == e.rank && p[1] == step && p[2] == e.restart_count) {
      std::fprintf(stderr, "mixtrain: MIXTRAIN_TEST_KILL: rank %d kills itself at step %lld\n", e.rank,
                   static_cast<long long>(step));
      std::fflush(stderr);
      ::kill(::getpid(), SIGKILL);
    }
}

}  // namespace mixtrain::distributed
