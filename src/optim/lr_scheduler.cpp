#include "core/json_limits.h"
#include "mixtrain/optim/lr_scheduler.h"

#include <cmath>
#include <limits>

#include "core/json_fields.h"
#include "mixtrain/base/error.h"

using mixtrain::json_io::json_field;

namespace mixtrain::optim {

namespace {
constexpr double kPi = 3.14159265358979323846;
}

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {}

void LRScheduler::initialize() {
  base_lrs_.clear();
  for (const auto& g : optimizer_.param_groups()) base_lrs_.push_back(g.options().get_lr());
  apply(0);
}

void LRScheduler::apply(int64_t epoch) {
  std::vector<double> lrs = lrs_at(epoch);
  auto& groups = optimizer_.param_groups();
  MT_CHECK(lrs.size() == groups.size(), name(), ": the optimizer has ", groups.size(), " parameter groups but the ",
           "scheduler was built for ", lrs.size(), " (add groups before building the scheduler)");
  // Checked where the rate is made: an inf or NaN rate turns the weights to inf/NaN in one step.
  for (size_t i = 0; i < lrs.size(); ++i)
    MT_CHECK(std::isfinite(lrs[i]), name(), ": the learning rate of group ", i, " at epoch ", epoch, " is ", lrs[i],
             " (base rate ", i < base_lrs_.size() ? base_lrs_[i] : 0.0,
             "), not a finite number; refusing to apply it (the schedule overflows there)");
  for (size_t i = 0; i < groups.size(); ++i) groups[i].options().set_lr(lrs[i]);
  last_epoch_ = epoch;
  last_lr_ = std::move(lrs);
}

void LRScheduler::step() { step(!optimizer_.last_step_skipped()); }

void LRScheduler::step(bool optimizer_stepped) {
  if (!optimizer_stepped) return;  // a skipped step leaves the schedule where it was
  MT_CHECK(last_epoch_ < std::numeric_limits<int64_t>::max(), name(), ": last_epoch is ", last_epoch_,
           " (2^63 - 1), the most an int64 counts; step() cannot go past it");
  apply(last_epoch_ + 1);
}

nlohmann::json LRScheduler::state_dict() const {
  nlohmann::json j = {{"type", name()}, {"last_epoch", last_epoch_}, {"base_lrs", base_lrs_}, {"_last_lr", last_lr_}};
  const nlohmann::json extra = settings();
  for (const auto& [key, value] : extra.items()) j[key] = value;
  return j;
}

int64_t LRScheduler::max_epoch() const { return std::numeric_limits<int64_t>::max(); }

namespace {
std::vector<double> parse_base_lrs(const nlohmann::json& state, size_t groups, const std::string& where) {
  const auto& jb = state["base_lrs"];
  MT_CHECK(jb.is_array() && jb.size() == groups, where, ".base_lrs must be an array of ", groups, " numbers, got ",
           mixtrain::detail::json_excerpt(jb));
  std::vector<double> base;
  for (size_t i = 0; i < jb.size(); ++i) {
    MT_CHECK(jb[i].is_number() && std::isfinite(jb[i].get<double>()) && jb[i].get<double>() >= 0.0, where,
             ".base_lrs[", i, "] must be a finite number >= 0, got ", mixtrain::detail::json_excerpt(jb[i]));
    base.push_back(jb[i].get<double>());
  }
  return base;
}
}  // namespace

void LRScheduler::validate_state_dict(const nlohmann::json& state) const {
  const std::string where = std::string(name()) + " state_dict";
  mixtrain::detail::check_json_depth(state, where);
  const std::string type = json_io::json_string(state, "type", where);
  MT_CHECK(type == name(), where, ".type is \"", type, "\" but the scheduler is ", name());
  // Settings are optional (states saved before they were recorded load), but must match.
  const nlohmann::json mine = settings();
  for (const auto& [key, value] : state.items()) {
    if (key == "type" || key == "last_epoch" || key == "base_lrs" || key == "_last_lr") continue;
    MT_CHECK(mine.contains(key), where, " has unknown key \"", key, "\"");
    MT_CHECK(value == mine[key], where, ".", key, " is ", mixtrain::detail::json_excerpt(value), " but this scheduler's is ",
             mixtrain::detail::json_excerpt(mine[key]),
             " (a state of another schedule)");
  }
  json_field(state, "base_lrs", where);
  const int64_t epoch = json_io::json_integer(state, "last_epoch", where, 0, std::numeric_limits<int64_t>::max());
  MT_CHECK(epoch <= max_epoch(), where, ".last_epoch ", epoch, " is past the schedule's last step ", max_epoch());
  parse_base_lrs(state, base_lrs_.size(), where);
}

void LRScheduler::load_state_dict(const nlohmann::json& state) {
  validate_state_dict(state);
  std::vector<double> previous = base_lrs_;
  base_lrs_ = parse_base_lrs(state, base_lrs_.size(), std::string(name()) + " state_dict");
  try {
    apply(state["last_epoch"].get<int64_t>());
  } catch (...) {  // a rate the loaded epoch cannot give: nothing of the state is kept
    base_lrs_ = std::move(previous);
    throw;
  }
}

// ---- CosineAnnealingLR ------------------------------------------------------------------------

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), T_max_(T_max), eta_min_(eta_min) {
  MT_CHECK(T_max > 0, "CosineAnnealingLR: T_max must be > 0, got ", T_max);
  MT_CHECK(std::isfinite(eta_min) && eta_min >= 0.0, "CosineAnnealingLR: eta_min must be a finite value >= 0, got ",
           eta_min);
  initialize();
}

std::vector<double> CosineAnnealingLR::lrs_at(int64_t epoch) {
  // PyTorch's _get_closed_form_lr; past T_max the cosine continues (rates rise again), as there.
  std::vector<double> out;
  for (double base : base_lrs_)
    out.push_back(eta_min_ + (base - eta_min_) * (1.0 + std::cos(kPi * static_cast<double>(epoch) / T_max_)) / 2.0);
  return out;
}

// ---- OneCycleLR -------------------------------------------------------------------------------

OneCycleLR::OneCycleLR(Optimizer& optimizer, const OneCycleLROptions& o) : LRScheduler(optimizer), options_(o) {
  MT_CHECK(o.total_steps() > 0, "OneCycleLR: total_steps must be > 0, got ", o.total_steps());
  MT_CHECK(o.pct_start() >= 0.0 && o.pct_start() <= 1.0, "OneCycleLR: pct_start must be in [0, 1], got ",
           o.pct_start());
  MT_CHECK(std::isfinite(o.max_lr()) && o.max_lr() >= 0.0, "OneCycleLR: max_lr must be a finite value >= 0, got ",
           o.max_lr());
  MT_CHECK(o.div_factor() > 0.0 && o.final_div_factor() > 0.0, "OneCycleLR: div_factor and final_div_factor must be ",
           "> 0, got ", o.div_factor(), " and ", o.final_div_factor());
  MT_CHECK(std::isfinite(o.base_momentum()) && std::isfinite(o.max_momentum()), "OneCycleLR: base_momentum and ",
           "max_momentum must be finite, got ", o.base_momentum(), " and ", o.max_momentum());
  if (o.cycle_momentum()) {
    for (const auto& g : optimizer.param_groups())
      MT_CHECK(g.options().has_momentum(), "OneCycleLR: optimizer ", optimizer.name(),
               " has no momentum or betas to cycle; pass cycle_momentum(false)");
  }
  const double initial = o.max_lr() / o.div_factor();
  const double min_lr = initial / o.final_div_factor();
  // Every rate of the cycle lies between these, so the schedule is finite if they are.
  MT_CHECK(std::isfinite(initial), "OneCycleLR: the initial rate max_lr / div_factor = ", o.max_lr(), " / ",
           o.div_factor(), " is ", initial, ", not a finite number");
  MT_CHECK(std::isfinite(min_lr), "OneCycleLR: the final rate initial / final_div_factor = ", initial, " / ",
           o.final_div_factor(), " is ", min_lr, ", not a finite number");
  const double total = static_cast<double>(o.total_steps());
  const double bm = o.base_momentum(), mm = o.max_momentum();
  if (o.three_phase()) {
    phases_ = {{o.pct_start() * total - 1.0, initial, o.max_lr(), mm, bm},
               {2.0 * o.pct_start() * total - 2.0, o.max_lr(), initial, bm, mm},
               {total - 1.0, initial, min_lr, mm, mm}};
  } else {
    phases_ = {{o.pct_start() * total - 1.0, initial, o.max_lr(), mm, bm}, {total - 1.0, o.max_lr(), min_lr, bm, mm}};
  }
  // PyTorch's base_lrs are the groups' initial_lr.
  for (auto& g : optimizer.param_groups()) g.options().set_lr(initial);
  initialize();
}

nlohmann::json OneCycleLR::settings() const {
  const OneCycleLROptions& o = options_;
  return {{"max_lr", o.max_lr()},
          {"total_steps", o.total_steps()},
          {"pct_start", o.pct_start()},
          {"anneal_strategy", o.anneal_strategy() == AnnealStrategy::Cos ? "cos" : "linear"},
          {"div_factor", o.div_factor()},
          {"final_div_factor", o.final_div_factor()},
          {"three_phase", o.three_phase()}};
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (options_.anneal_strategy() == AnnealStrategy::Linear) return (end - start) * pct + start;
  return end + (start - end) / 2.0 * (std::cos(kPi * pct) + 1.0);
}

std::vector<double> OneCycleLR::lrs_at(int64_t epoch) {
  MT_CHECK(epoch <= options_.total_steps(), "OneCycleLR: tried to step ", epoch, " times; the specified number of ",
           "total steps is ", options_.total_steps());
  const double step = static_cast<double>(epoch);
  double start_step = 0.0, lr = 0.0, momentum = 0.0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& ph = phases_[i];
    if (step <= ph.end_step || i + 1 == phases_.size()) {
      const double pct = (step - start_step) / (ph.end_step - start_step);
      lr = anneal(ph.start_lr, ph.end_lr, pct);
      momentum = anneal(ph.start_momentum, ph.end_momentum, pct);
      break;
    }
    start_step = ph.end_step;
  }
  if (options_.cycle_momentum())
    for (auto& g : optimizer_.param_groups()) g.options().set_momentum(momentum);
  return std::vector<double>(optimizer_.param_groups().size(), lr);
}

nlohmann::json LRScheduler::settings() const { return nlohmann::json::object(); }
nlohmann::json CosineAnnealingLR::settings() const { return {{"T_max", T_max_}, {"eta_min", eta_min_}}; }

}  // namespace mixtrain::optim
