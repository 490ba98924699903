// Optimizer checkpoints: state_dict() / state_tensors() out, and load_state_dict(), which checks
// the whole document and the tensors before it changes anything.
#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "core/json_fields.h"
#include "core/json_limits.h"
#include "mixtrain/base/error.h"
#include "mixtrain/base/grad_mode.h"
#include "mixtrain/optim/optimizer.h"

namespace mixtrain::optim {

using json_io::json_path;

// ---- state_dict -------------------------------------------------------------------------------

nlohmann::json Optimizer::state_dict() const {
  nlohmann::json groups = nlohmann::json::array();
  nlohmann::json state = nlohmann::json::object();
  int64_t index = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    nlohmann::json group = groups_[g].options().to_json();
    nlohmann::json params = nlohmann::json::array();
    for (size_t i = 0; i < groups_[g].params().size(); ++i, ++index) {
      params.push_back(index);
      const ParamState& s = state_[g][i];
      const int64_t taken = s.taken_steps();
      if (taken == 0 && s.buffers.empty() && !s.master.defined()) continue;
      nlohmann::json names = nlohmann::json::array();
      if (s.master.defined()) names.push_back("master_param");
      for (const auto& [n, t] : s.buffers) names.push_back(n);
      state[std::to_string(index)] = {{"step", taken}, {"tensors", names}};
    }
    group["params"] = params;
    groups.push_back(group);
  }
  return {{"type", name()},
          {"param_groups", groups},
          {"state", state},
          {"steps_taken", steps_taken()},
          {"steps_skipped", steps_skipped()},
          {"last_step_skipped", last_step_skipped()}};
}

NamedTensors Optimizer::state_tensors() const {
  NamedTensors out;
  int64_t index = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params().size(); ++i, ++index) {
      const ParamState& s = state_[g][i];
      const std::string prefix = "state." + std::to_string(index) + ".";
      if (s.master.defined()) out.emplace_back(prefix + "master_param", s.master);
      for (const auto& [n, t] : s.buffers) out.emplace_back(prefix + n, t);
    }
  }
  return out;
}

namespace {
// Step counts past 2^53 are not exact in the double arithmetic of bias corrections and cannot
// be reached by a real run; the bound also keeps step + 1 from overflowing.
constexpr int64_t kMaxStep = int64_t{1} << 53;

std::string set_str(const std::vector<std::string>& names) {
  std::string s = "{";
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s + "}";
}

struct ParsedParam {
  int64_t step = 0;
  std::vector<std::pair<std::string, Tensor>> tensors;  // by state name, "master_param" included
};
struct Parsed {
  std::vector<std::unique_ptr<OptimizerOptions>> options;
  std::vector<ParsedParam> params;  // by global index
  int64_t steps_taken = 0, steps_skipped = 0;
  bool last_step_skipped = false;
};
}  // namespace

namespace {

// What the state entries are checked against: the optimizer's parameters by global index and its
// state tensors' names.
struct StateContext {
  const Optimizer& opt;
  const std::string& where;
  const std::vector<std::string>& buffer_names;
  const std::vector<std::vector<std::string>>& buffer_sets;
  const std::vector<bool>& has_master;
  std::vector<const Tensor*> params;
  std::map<std::string, const Tensor*> by_name;  // the tensors given, by name
  std::set<std::string> used;                    // those the state lists
};

// "param_groups": each group's hyperparameters, and the parameters by global index.
void parse_groups(StateContext& c, const std::vector<ParamGroup>& groups, const nlohmann::json& doc, Parsed& out) {
  const auto& jgroups = doc["param_groups"];
  MT_CHECK(jgroups.is_array() && jgroups.size() == groups.size(), json_path(c.where, "param_groups"),
           " must be an array of ", groups.size(), " groups (as the optimizer has), got ",
           jgroups.is_array() ? std::to_string(jgroups.size()) + " groups" : jgroups.type_name());
  int64_t index = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::string gw = json_path(json_path(c.where, "param_groups"), g);
    nlohmann::json hyper = jgroups[g];
    MT_CHECK(hyper.is_object(), gw, " must be an object");
    const auto& jp = json_io::json_field(hyper, "params", gw);
    const size_t n = groups[g].params().size();
    MT_CHECK(jp.is_array() && jp.size() == n, json_path(gw, "params"), " must list ", n,
             " parameter indices (the optimizer's group ", g, " has ", n, " parameters), got ", mixtrain::detail::json_excerpt(jp));
    for (size_t i = 0; i < n; ++i, ++index) {
      MT_CHECK(jp[i].is_number_integer() && jp[i].get<int64_t>() == index, json_path(gw, "params"), "[", i,
               "] must be ", index, ", got ", mixtrain::detail::json_excerpt(jp[i]));
      c.params.push_back(&groups[g].params()[i]);
    }
    hyper.erase("params");
    auto options = groups[g].options().clone();
    options->from_json(hyper, gw);
    options->validate(gw);
    MT_CHECK(options->get_master_weights() == groups[g].options().get_master_weights(), json_path(gw, "master_weights"),
             " is ", options->get_master_weights() ? "true" : "false", " but the optimizer was built with ",
             groups[g].options().get_master_weights() ? "true" : "false");
    out.options.push_back(std::move(options));
  }
}

// One "state" entry's tensors: each a state tensor of the optimizer, given, of the parameter's
// shape and (master) dtype, listed once; buffer sets whole; the master copy where there is one.
void parse_state_tensors(StateContext& c, const std::string& key, const nlohmann::json& names, const std::string& sw,
                         int64_t idx, ParsedParam& pp) {
  MT_CHECK(names.is_array(), json_path(sw, "tensors"), " must be an array of names");
  const Tensor& param = *c.params[idx];
  for (const auto& jn : names) {
    MT_CHECK(jn.is_string(), json_path(sw, "tensors"), " must hold strings, got ", mixtrain::detail::json_excerpt(jn));
    const std::string n = jn.get<std::string>();
    bool allowed = n == "master_param" && c.has_master[idx];
    for (const auto& b : c.buffer_names) allowed = allowed || n == b;
    MT_CHECK(allowed, json_path(sw, "tensors"), ": \"", n, "\" is not a state tensor of ", c.opt.name(),
             n == "master_param" ? " for this parameter (it has no master copy)" : "");
    const std::string full = "state." + key + "." + n;
    auto found = c.by_name.find(full);
    MT_CHECK(found != c.by_name.end(), c.where, ": tensor \"", full, "\" is listed but missing from the tensors");
    const Tensor& t = *found->second;
    const DType want = c.has_master[idx] ? kFloat32 : param.dtype();
    MT_CHECK(t.defined() && t.shape() == param.shape() && t.dtype() == want, c.where, ": tensor \"", full, "\" is ",
             t.defined() ? t.summary() : std::string("undefined"), " but parameter ", idx, " needs shape ",
             shape_str(param.shape()), " and dtype ", want);
    MT_CHECK(c.used.insert(full).second, json_path(sw, "tensors"), " lists \"", n, "\" twice");
    pp.tensors.emplace_back(n, t);
  }
  std::set<std::string> present;
  for (const auto& [n, t] : pp.tensors) present.insert(n);
  for (const auto& set : c.buffer_sets) {
    size_t have = 0;
    for (const auto& n : set) have += present.count(n);
    MT_CHECK(have == 0 || have == set.size(), json_path(sw, "tensors"), ": a partial ", c.opt.name(), " state: ",
             set_str(set), " are kept together, but only ", have, " of them are listed");
  }
  if (c.has_master[idx]) {
    bool found_master = false;
    for (const auto& [n, t] : pp.tensors) found_master = found_master || n == "master_param";
    MT_CHECK(found_master, sw, ": parameter ", idx, " keeps an fp32 master copy but \"master_param\" is not listed");
  }
}

// "state": an entry per parameter index, and every tensor given listed by one.
void parse_state_entries(StateContext& c, const nlohmann::json& doc, const NamedTensors& tensors, Parsed& out) {
  for (const auto& [n, t] : tensors) {
    MT_CHECK(c.by_name.emplace(n, &t).second, c.where, ": tensor \"", n, "\" is given twice");
  }
  out.params.resize(c.params.size());
  const auto& jstate = doc["state"];
  MT_CHECK(jstate.is_object(), json_path(c.where, "state"), " must be an object keyed by parameter index");
  for (auto it = jstate.begin(); it != jstate.end(); ++it) {
    const std::string sw = json_path(c.where, "state") + "[\"" + it.key() + "\"]";
    size_t pos = 0;
    int64_t idx = -1;
    try {
      idx = std::stoll(it.key(), &pos);
    } catch (...) {
    }
    MT_CHECK(pos == it.key().size() && idx >= 0 && idx < static_cast<int64_t>(c.params.size()) &&
                 std::to_string(idx) == it.key(),
             sw, ": the key must be a parameter index in [0, ", c.params.size(), ")");
    json_io::check_object_keys(it.value(), {"step", "tensors"}, {}, sw);
    ParsedParam& pp = out.params[idx];
    pp.step = json_io::json_integer(it.value(), "step", sw, 0, kMaxStep);
    parse_state_tensors(c, it.key(), it.value()["tensors"], sw, idx, pp);
  }
  for (size_t i = 0; i < c.params.size(); ++i) {
    MT_CHECK(!c.has_master[i] || !out.params[i].tensors.empty(), json_path(c.where, "state"), ": parameter ", i,
             " keeps an fp32 master copy but the state has no entry for it");
  }
  for (const auto& [n, t] : tensors) {
    MT_CHECK(c.used.count(n), c.where, ": tensor \"", n, "\" is not listed in the state (a state file of another ",
             "optimizer or model?)");
  }
}

// The step counters, each parameter's step at most steps_taken.
void parse_step_counts(const nlohmann::json& doc, const std::string& where, Parsed& out) {
  if (doc.contains("steps_taken")) {
    out.steps_taken = json_io::json_integer(doc, "steps_taken", where, 0, kMaxStep);
    // A parameter takes at most one update per optimizer step.
    for (size_t i = 0; i < out.params.size(); ++i)
      MT_CHECK(out.params[i].step <= out.steps_taken, json_path(where, "state"), "[\"", i, "\"].step = ",
               out.params[i].step, " is more than steps_taken = ", out.steps_taken,
               " (each parameter is updated at most once per step)");
  } else {
    // Documents from before steps_taken was saved: the most any parameter took keeps the
    // invariant that the next save is checked against.
    for (const ParsedParam& p : out.params) out.steps_taken = std::max(out.steps_taken, p.step);
  }
  if (doc.contains("steps_skipped"))
    out.steps_skipped = json_io::json_integer(doc, "steps_skipped", where, 0, kMaxStep);
  if (doc.contains("last_step_skipped")) out.last_step_skipped = json_io::json_bool(doc, "last_step_skipped", where);
}

}  // namespace

// Checks the whole document and the tensors against this optimizer; returns what to apply.
static Parsed parse_state(const Optimizer& opt, const std::vector<ParamGroup>& groups,
                          const std::vector<std::string>& buffer_names,
                          const std::vector<std::vector<std::string>>& buffer_sets, const nlohmann::json& doc,
                          const NamedTensors& tensors, const std::vector<bool>& has_master) {
  const std::string where = std::string(opt.name()) + " state_dict";
  mixtrain::detail::check_json_depth(doc, where);
  json_io::check_object_keys(doc, {"type", "param_groups", "state"}, {"steps_taken", "steps_skipped", "last_step_skipped"},
                            where);
  const std::string type = json_io::json_string(doc, "type", where);
  MT_CHECK(type == opt.name(), json_path(where, "type"), " is \"", type, "\" but the optimizer is ", opt.name());
  Parsed out;
  StateContext c{opt, where, buffer_names, buffer_sets, has_master, {}, {}, {}};
  parse_groups(c, groups, doc, out);
  parse_state_entries(c, doc, tensors, out);
  parse_step_counts(doc, where, out);
  return out;
}

void Optimizer::validate_state_dict(const nlohmann::json& state, const NamedTensors& tensors) const {
  std::vector<bool> has_master;
  for (const auto& gs : state_)
    for (const auto& s : gs) has_master.push_back(s.master.defined());
  parse_state(*this, groups_, buffer_names(), buffer_sets(), state, tensors, has_master);
}

void Optimizer::load_state_dict(const nlohmann::json& state, const NamedTensors& tensors) {
  std::vector<bool> has_master;
  for (const auto& gs : state_)
    for (const auto& s : gs) has_master.push_back(s.master.defined());
  Parsed parsed = parse_state(*this, groups_, buffer_names(), buffer_sets(), state, tensors, has_master);

  // Everything checked: apply. Buffers are fresh copies (the caller's tensors stay theirs);
  // master copies are written in place so handles from master_params() stay valid.
  NoGradGuard no_grad;
  int64_t index = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    groups_[g].set_options(std::move(parsed.options[g]));
    for (size_t i = 0; i < groups_[g].params().size(); ++i, ++index) {
      ParamState& s = state_[g][i];
      const Tensor& p = groups_[g].params()[i];
      ParsedParam& pp = parsed.params[index];
      s.step = pp.step;
      s.skipped_steps = Tensor();
      s.buffers.clear();
      s.master_grad_fresh = false;
      // State lives in the layout of the weight it updates (channels-last weights: channels-last).
      const MemoryFormat layout = (s.master.defined() ? s.master : p).suggest_memory_format();
      for (auto& [n, t] : pp.tensors) {
        if (n == "master_param") {
          s.master.copy_(t);
        } else {
          s.buffers.emplace_back(n, t.to(p.device()).contiguous(layout).clone());
        }
      }
    }
  }
  steps_taken_ = parsed.steps_taken;
  steps_skipped_ = parsed.steps_skipped;
  last_step_skipped_ = parsed.last_step_skipped;
  gated_steps_ = 0;
  gated_skips_ = Tensor();
  last_found_inf_ = Tensor();
}

}  // namespace mixtrain::optim
