// The elastic agent's membership (elastic.h). Store keys, under "mixtrain/elastic/":
//   g<G>/alive/<id>  a member of generation G-1 that saw it fail: its completed steps and weight
//   g<G>/members     generation G: its members in rank order, why it formed, who left or joined.
//                    Written once, by whoever proposes first (set_if_absent); every process
//                    follows it, and a survivor not in it joins again
//   g<G>/pg/...      generation G's rendezvous and Gloo addresses (connect_group)
//   join/<k>         the k-th process waiting to join, claimed with set_if_absent
// No key is written twice, so Gloo's file store (which refuses that) serves as well as the TCP
// store the elastic launcher serves.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "distributed/elastic_internal.h"
#include "distributed/host_name.h"
#include "mixtrain/base/error.h"
#include "mixtrain/base/rng.h"
#include "mixtrain/core/factories.h"
#include "mixtrain/distributed/sampler.h"

namespace mixtrain::distributed {

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kRoot = "mixtrain/elastic/";

std::vector<char> bytes(const nlohmann::json& j) {
  const std::string s = j.dump();
  return std::vector<char>(s.begin(), s.end());
}

std::string gen_key(int64_t g, const std::string& rest) { return "g" + std::to_string(g) + "/" + rest; }

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// $MIXTRAIN_TEST_JOIN_AT: the step after which rank 0 waits for a joiner (-1: none).
int64_t test_join_step() {
  static const int64_t step = [] {
    const char* v = std::getenv("MIXTRAIN_TEST_JOIN_AT");
    if (!v || !*v) return int64_t{-1};
    char* end = nullptr;
    const long long x = std::strtoll(v, &end, 10);
    MT_CHECK(end && *end == '\0' && x >= 0, "MIXTRAIN_TEST_JOIN_AT=\"", v, "\" is not a step");
    return static_cast<int64_t>(x);
  }();
  return step;
}

// A generation's record: members (id, weight, who) in rank order, and why it formed.
struct Record {
  nlohmann::json j;
  std::vector<std::string> ids() const {
    std::vector<std::string> out;
    for (const auto& m : j.at("members")) out.push_back(m.at("id").get<std::string>());
    return out;
  }
  int index_of(const std::string& id) const {
    const auto v = ids();
    const auto it = std::find(v.begin(), v.end(), id);
    return it == v.end() ? -1 : static_cast<int>(it - v.begin());
  }
};

}  // namespace

struct ElasticAgent::Impl {
  ElasticOptions options;
  LaunchEnv launch;
  std::shared_ptr<KeyValueStore> store;  // keys under kRoot
  std::chrono::milliseconds timeout{0};
  bool check = true;
  std::string id, who;  // this process: its member id, and how messages name it
  double weight = 1.0;
  ElasticState state;
  std::vector<std::function<void(const MembershipChange&)>> listeners;
  std::vector<std::string> member_who;  // per member, in rank order
  int64_t next_join = 0;                // join requests below this index are handled
  Tensor join_flag;
  Work join_work;
  std::deque<double> step_seconds;  // the last steps' durations: how long a busy member may take to notice

  Deadline deadline() const { return Deadline(timeout); }

  enum class Outcome { Redo, TookState, Rejoined };
  // Generation g as `record` says: its group, then the state. Whether this rank took the state.
  bool form(ElasticAgent& a, const nlohmann::json& record, int64_t g);
  // A joiner's admission (or an excluded survivor's return): request, wait, form.
  void join(ElasticAgent& a);
  // After the group failed: the next generation of the members left.
  Outcome recover(ElasticAgent& a, const std::string& reason, Clock::time_point started, bool in_step);
  std::string propose_members(ElasticAgent& a, int64_t g, const std::vector<std::string>& old,
                              const std::vector<double>& old_weights, const std::vector<std::string>& old_who,
                              const std::string& reason, const Deadline& d);
  // At a boundary where rank 0 saw joiners waiting: the next generation with them.
  void admit(ElasticAgent& a);
  void announce(ElasticAgent& a, MembershipChange c);

  // A survivor that was computing notices the failure at its next collective, within about a
  // step: the proposer waits that long (3 recent steps, at least 0.25 s, at most the timeout) for
  // every member to say it is alive before deciding without the silent ones.
  std::chrono::milliseconds decision_window() const {
    double longest = 1.0;
    if (!step_seconds.empty()) longest = *std::max_element(step_seconds.begin(), step_seconds.end());
    const double s = std::min(std::max(3 * longest, 0.25), std::chrono::duration<double>(timeout).count());
    return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
  }
};

ElasticAgent::ElasticAgent(const ElasticOptions& options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.options = options;
  m.launch = read_launch_env();
  ProcessGroupOptions pg;
  pg.timeout(options.timeout()).check_collectives(options.check_collectives());
  m.timeout = group_timeout(pg);
  m.check = group_checks_collectives(pg);
  MT_CHECK(options.min_world_size() >= 1 && options.max_attempts() >= 1 && options.join_check_every() >= 1,
           "ElasticAgent: min_world_size, max_attempts and join_check_every must be at least 1");
  std::string spec = options.store();
  if (spec.empty()) spec = default_store_spec(m.launch);
  MT_CHECK(!spec.empty() && (spec.rfind("tcp://", 0) != 0 || store_served_by_launcher()),
           "ElasticAgent: the store \"", spec, "\" ", spec.empty() ? "is this process's own" : "is served by rank 0",
           ", so it would go with a rank that dies. Elastic training needs a store that outlives every rank: run under "
           "`mixtrain launch --elastic` (its launcher serves one), or give MIXTRAIN_STORE=file:/dir (a directory "
           "every rank reaches) or redis://host:port");
  const Deadline d = m.deadline();
  m.store = std::make_shared<PrefixStore>(open_store(spec, m.launch, d), kRoot);
  m.who = "host " + this_host() + ", pid " + std::to_string(getpid());
  if (m.launch.elastic_join) {
    std::random_device rd;
    m.id = "j" + std::to_string(getpid()) + "-" + std::to_string(rd());
    m.weight = options.weight() > 0 ? options.weight() : 1.0;
    if (options.weight() <= 0)
      if (const char* w = std::getenv("MIXTRAIN_ELASTIC_WEIGHT")) {
        char* end = nullptr;
        m.weight = std::strtod(w, &end);
        MT_CHECK(end && *end == '\0' && m.weight > 0 && std::isfinite(m.weight), "ElasticAgent: ",
                 "MIXTRAIN_ELASTIC_WEIGHT=\"", w, "\" is not a positive number");
      }
  } else {
    m.id = "r" + std::to_string(m.launch.rank);
    if (!options.rank_weights().empty())
      check_rank_weights(options.rank_weights(), m.launch.world_size, "ElasticAgent: rank_weights");
  }
}

ElasticAgent::~ElasticAgent() {
  if (impl_->join_work.valid()) {
    try {
      impl_->join_work.wait();
    } catch (...) {  // the job is ending; its last flag does not matter
    }
  }
}

void ElasticAgent::set_state(ElasticState state) { impl_->state = std::move(state); }

void ElasticAgent::on_change(std::function<void(const MembershipChange&)> fn) {
  impl_->listeners.push_back(std::move(fn));
}


bool ElasticAgent::Impl::form(ElasticAgent& a, const nlohmann::json& record, int64_t g) {
  const Record r{record};
  const int index = r.index_of(id);
  MT_CHECK(index >= 0, "elastic: internal error: forming generation ", g, " without this process");
  LaunchEnv e = launch;
  const bool one_host = e.local_world_size == e.world_size;
  e.rank = index;
  e.world_size = static_cast<int>(record.at("members").size());
  e.local_world_size = one_host ? e.world_size : e.local_world_size;
  e.elastic_join = false;
  join_flag = Tensor();
  join_work = Work();
  auto scoped = std::make_shared<PrefixStore>(store, gen_key(g, "pg/"));
  a.group_ = connect_group(scoped, e, timeout, check, options.hostname(), deadline());
  GroupInternals::refuse_cuda(*a.group_, "elastic groups communicate CPU tensors only (Gloo): an NCCL communicator "
                                         "torn down in the middle of a collective cannot be rebuilt safely here; "
                                         "train elastically on CPU ranks, or use mixtrain launch --max-restarts on GPUs");
  a.members_ = r.ids();
  a.weights_.clear();
  member_who.clear();
  for (const auto& mem : record.at("members")) {
    a.weights_.push_back(mem.at("weight").get<double>());
    member_who.push_back(mem.at("who").get<std::string>());
  }
  a.rank_ = index;
  a.generation_ = g;
  next_join = record.value("next_join", next_join);
  return sync_state(*a.group_, state, a.steps_);
}

void ElasticAgent::Impl::announce(ElasticAgent& a, MembershipChange c) {
  c.generation = a.generation_;
  c.world_after = a.world_size();
  c.rank = a.rank_;
  c.weights = a.weights_;
  a.changes_.push_back(c);
  if (a.rank_ == 0) {
    std::fprintf(stderr, "mixtrain elastic: %s\n", c.describe().c_str());
    std::fflush(stderr);
  }
  for (auto& fn : listeners) fn(c);
}

void ElasticAgent::Impl::join(ElasticAgent& a) {
  a.joined_late_ = true;
  const auto start = Clock::now();
  for (int attempt = 0;; ++attempt) {
    const Deadline d = deadline();
    const nlohmann::json request = {{"id", id}, {"weight", weight}, {"who", who}};
    int64_t k = 0;
    while (!store->set_if_absent("join/" + std::to_string(k), bytes(request), d)) ++k;
    // Watch the first generation not decided yet, and every one after it.
    int64_t g = 0;
    while (store->present({gen_key(g + 1, "members")}, d)[0]) ++g;
    bool formed = false;
    for (;;) {
      WaitFor why;
      why.what = "a running elastic job to admit this process (join request " + std::to_string(k) +
                 "; the job looks for joiners at its step boundaries)";
      why.owners = {"the job's rank 0"};
      const std::string key = gen_key(g + 1, "members");
      const Record r{read_generation_record(store->get(key, d, why), kRoot + key)};
      ++g;
      if (r.j.is_null() || r.index_of(id) < 0) continue;  // malformed, or formed without this request: the next one
      try {
        form(a, r.j, g);
        formed = true;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "mixtrain elastic: joining generation %lld failed (%s); asking again\n",
                     static_cast<long long>(g), e.what());
        if (a.group_) a.group_->abort(e.what());
      }
      break;
    }
    if (formed) break;
    MT_CHECK(attempt + 1 < options.max_attempts(), "elastic: this process could not join the running job in ",
             attempt + 1, " attempts");
  }
  MembershipChange c;
  c.step = a.steps_;
  c.cause = "join";
  c.joined = {who};
  c.world_before = a.world_size() - 1;
  c.seconds_lost = seconds_since(start);
  announce(a, c);
}

// Says this rank is alive in generation g and waits for every member of the last one to say so,
// for the decision window, or for another's proposal; proposes the members alive by then (first
// proposal wins). Returns the generation's record key.
std::string ElasticAgent::Impl::propose_members(ElasticAgent& a, int64_t g, const std::vector<std::string>& old,
                                                const std::vector<double>& old_weights,
                                                const std::vector<std::string>& old_who, const std::string& reason,
                                                const Deadline& d) {
  store->set(gen_key(g, "alive/" + id), bytes({{"steps", a.steps_}}), d);
  std::vector<std::string> keys;
  for (const auto& m : old) keys.push_back(gen_key(g, "alive/" + m));
  const std::string decided = gen_key(g, "members");
  const auto until = Clock::now() + decision_window();
  std::vector<bool> alive(keys.size(), false);
  auto pause = std::chrono::milliseconds(1);
  while (!store->present({decided}, d)[0]) {
    alive = store->present(keys, d);
    if (std::all_of(alive.begin(), alive.end(), [](bool b) { return b; }) || Clock::now() >= until) {
      nlohmann::json members = nlohmann::json::array(), lost = nlohmann::json::array();
      for (size_t i = 0; i < old.size(); ++i) {
        if (alive[i])
          members.push_back({{"id", old[i]}, {"weight", old_weights[i]}, {"who", old_who[i]}});
        else
          lost.push_back("rank " + std::to_string(i) + " (" + old_who[i] + ")");
      }
      store->set_if_absent(decided, bytes({{"members", members}, {"cause", "failure"}, {"lost", lost},
                                           {"reason", reason}, {"next_join", next_join}}), d);
      break;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
  return decided;
}

ElasticAgent::Impl::Outcome ElasticAgent::Impl::recover(ElasticAgent& a, const std::string& reason,
                                                        Clock::time_point started, bool in_step) {
  if (a.group_) a.group_->abort(reason);  // its connections close: members still waiting on this rank fail now
  std::vector<std::string> old = a.members_, old_who = member_who;
  std::vector<double> old_weights = a.weights_;
  const int world_before = a.world_size();
  const int64_t steps_before = a.steps_;
  // Generations that could not be formed, in a row: bounded, since a failure that is no peer's
  // death (a setting that differs between ranks, a stranger's records) recurs in every one, and
  // without a bound the members would propose generation after generation forever.
  int failed = 0;
  auto give_up_unless_attempts_left = [&](int64_t g, const std::string& why) {
    ++failed;
    MT_CHECK(failed < options.max_attempts(), "elastic: ", failed, " generations in a row (", g - failed + 1, " to ", g,
             ") could not be formed (ElasticOptions max_attempts is ", options.max_attempts(),
             "); stopping. The last: ", why);
  };
  for (int64_t g = a.generation_ + 1;; ++g) {
    const Deadline d = deadline();
    const std::string decided = propose_members(a, g, old, old_weights, old_who, reason, d);
    const Record r{read_generation_record(store->get_now(decided, d), kRoot + decided)};
    if (r.j.is_null()) {  // every member reads the same bytes: all go on to the next generation
      give_up_unless_attempts_left(g, "generation " + std::to_string(g) + "'s record in the store is malformed");
      continue;
    }
    if (r.index_of(id) < 0) {
      // Decided without this rank (it noticed late): it joins again, like a new process, and
      // receives the state at the job's next step boundary.
      std::fprintf(stderr, "mixtrain elastic: generation %lld formed without this rank (%s), which joins again\n",
                   static_cast<long long>(g), who.c_str());
      join(a);
      return Outcome::Rejoined;
    }
    MT_CHECK(static_cast<int>(r.j.at("members").size()) >= options.min_world_size(), "elastic: only ",
             r.j.at("members").size(), " ranks are left, fewer than the minimum of ", options.min_world_size());
    bool took = false;
    try {
      took = form(a, r.j, g);
    } catch (const std::exception& e) {
      // A member died or stalled while the generation formed: its members try the next one.
      if (a.group_) a.group_->abort(e.what());
      old = r.ids();
      old_weights.clear();
      old_who.clear();
      for (const auto& mem : r.j.at("members")) {
        old_weights.push_back(mem.at("weight").get<double>());
        old_who.push_back(mem.at("who").get<std::string>());
      }
      give_up_unless_attempts_left(g, e.what());
      continue;
    }
    MembershipChange c;
    c.step = steps_before;
    c.cause = "failure";
    c.reason = r.j.value("reason", reason);
    for (const auto& l : r.j.value("lost", nlohmann::json::array())) c.lost.push_back(l.get<std::string>());
    c.world_before = world_before;
    c.seconds_lost = seconds_since(started);
    c.redo = in_step && !took;
    announce(a, c);
    return took ? Outcome::TookState : Outcome::Redo;
  }
}

void ElasticAgent::Impl::admit(ElasticAgent& a) {
  const int64_t g = a.generation_ + 1;
  const Deadline d = deadline();
  const std::string decided = gen_key(g, "members");
  const auto start = Clock::now();
  if (a.rank_ == 0) {
    nlohmann::json members = nlohmann::json::array(), joined = nlohmann::json::array();
    for (size_t i = 0; i < a.members_.size(); ++i)
      members.push_back({{"id", a.members_[i]}, {"weight", a.weights_[i]}, {"who", member_who[i]}});
    std::vector<std::string> taken = a.members_;
    int64_t k = next_join;
    for (; store->present({"join/" + std::to_string(k)}, d)[0]; ++k) {
      const nlohmann::json request = read_join_request(store->get_now("join/" + std::to_string(k), d), k, taken);
      if (request.is_null()) continue;
      taken.push_back(request.at("id").get<std::string>());
      members.push_back(request);
      joined.push_back(request.at("who"));
    }
    store->set_if_absent(decided, bytes({{"members", members}, {"cause", "join"}, {"joined", joined},
                                         {"next_join", k}}), d);
  }
  WaitFor why;
  why.what = "rank 0 to name the joiners of generation " + std::to_string(g);
  why.owners = {"rank 0"};
  const Record r{read_generation_record(store->get(decided, d, why), kRoot + decided)};
  if (r.j.is_null()) {
    // Not rank 0's record (a stranger wrote it first): the members recover as from a failure, in
    // the generation after it; the joiners' requests stay unconsumed for a later boundary.
    a.generation_ = g;
    recover(a, "generation " + std::to_string(g) + "'s record in the store is malformed", start, false);
    return;
  }
  // The requests this generation names are consumed whether or not it forms: a joiner that dies
  // before its admission completes (or a request nobody stands behind) is not asked in again.
  next_join = std::max(next_join, r.j.value("next_join", next_join));
  const int world_before = a.world_size();
  a.group_->abort("replaced by generation " + std::to_string(g));
  if (r.index_of(id) < 0) {
    join(a);  // a failure's generation formed first without this rank
    return;
  }
  try {
    form(a, r.j, g);
  } catch (const std::exception& e) {
    // A joiner (or member) failed while the generation formed: the members recover as from any
    // failure, in the generation after this one (which is decided and must not be formed again).
    a.generation_ = g;
    recover(a, e.what(), start, false);
    return;
  }
  MembershipChange c;
  c.step = a.steps_;
  c.cause = r.j.value("cause", std::string("join"));
  for (const auto& j : r.j.value("joined", nlohmann::json::array())) c.joined.push_back(j.get<std::string>());
  c.world_before = world_before;
  c.seconds_lost = seconds_since(start);
  announce(a, c);
}

void ElasticAgent::start() {
  Impl& m = *impl_;
  MT_CHECK(!group_, "ElasticAgent.start: already started");
  if (m.launch.elastic_join) return m.join(*this);
  // The first generation: every rank of the launch, in launch order.
  nlohmann::json members = nlohmann::json::array();
  for (int r = 0; r < m.launch.world_size; ++r)
    members.push_back(
        {{"id", "r" + std::to_string(r)},
         {"weight", m.options.rank_weights().empty() ? 1.0 : m.options.rank_weights()[static_cast<size_t>(r)]},
         {"who", "launch rank " + std::to_string(r)}});
  const nlohmann::json first = {{"members", members}, {"cause", "start"}, {"next_join", 0}};
  const auto started = Clock::now();
  try {
    m.form(*this, first, 0);
  } catch (const std::exception& e) {
    if (group_ && group_->healthy()) throw;  // not a peer's failure: this rank's own error
    // A rank lost before the first generation formed: the others go on as after any later loss,
    // from the launch's membership.
    const Record r{first};
    members_ = r.ids();
    weights_.clear();
    m.member_who.clear();
    for (const auto& mem : members) {
      weights_.push_back(mem.at("weight").get<double>());
      m.member_who.push_back(mem.at("who").get<std::string>());
    }
    rank_ = m.launch.rank;
    generation_ = 0;
    m.recover(*this, e.what(), started, false);
  }
}

bool ElasticAgent::run_step(const std::function<void(int)>& fn) { return run(fn, true); }

void ElasticAgent::run_collectives(const std::function<void(int)>& fn) { run(fn, false); }

bool ElasticAgent::run(const std::function<void(int)>& fn, bool is_step) {
  Impl& m = *impl_;
  MT_CHECK(group_ != nullptr, "ElasticAgent: call start() before running steps");
  const GeneratorState rng = default_generator().state();
  const auto started = Clock::now();
  for (int attempt = 0;; ++attempt) {
    std::string reason;
    try {
      fn(attempt);
      if (is_step) {
        m.step_seconds.push_back(seconds_since(started));
        if (m.step_seconds.size() > 8) m.step_seconds.pop_front();
        ++steps_;
      }
      return true;
    } catch (const std::exception&) {
      if (group_->healthy()) throw;  // not a peer's failure: the trainer's own error
      if (attempt + 1 >= m.options.max_attempts()) throw;
      reason = group_->failure();
    }
    const Impl::Outcome outcome = m.recover(*this, reason, started, is_step);
    if (outcome != Impl::Outcome::Redo) return !is_step;  // the step's outcome came with the state
    default_generator().set_state(rng);                    // the redone step draws what the first drew
  }
}

void ElasticAgent::step_boundary() {
  Impl& m = *impl_;
  MT_CHECK(group_ != nullptr, "ElasticAgent: call start() before step_boundary");
  try {
    if (m.join_work.valid()) {
      m.join_work.wait();
      m.join_work = Work();
      if (m.join_flag.to_vector<int64_t>()[0] > 0) {
        // The joiners start their first step next, with no flag in flight: nor do the members.
        m.admit(*this);
        return;
      }
    }
    if (steps_ % m.options.join_check_every() != 0) return;
    // Rank 0 looks; every rank learns what it saw from a flag all-reduced behind the next step,
    // so the look costs the others nothing and every rank admits at the same boundary.
    const std::string next = "join/" + std::to_string(m.next_join);
    // The tests' hook for a join at a chosen step: joiners wait until then, and then rank 0
    // waits (up to the timeout) for the first one.
    const int64_t test_at = test_join_step();
    if (test_at >= 0 && steps_ < test_at) return;
    if (rank_ == 0 && test_at == steps_ && m.next_join == 0) {
      WaitFor why;
      why.what = "a process to join (MIXTRAIN_TEST_JOIN_AT=" + std::to_string(steps_) + ")";
      why.owners = {"a joiner"};
      m.store->wait({next}, m.deadline(), why);
    }
    bool waiting = false;
    if (rank_ == 0) {
      // Malformed requests are passed over here, so they never cost the others a generation.
      for (;; ++m.next_join) {
        const std::string key = "join/" + std::to_string(m.next_join);
        waiting = m.store->present({key}, m.deadline())[0];
        if (!waiting || !read_join_request(m.store->get_now(key, m.deadline()), m.next_join, members_).is_null()) break;
      }
    }
    m.join_flag = full({1}, waiting ? 1.0 : 0.0, TensorOptions(kInt64));
    m.join_work = UncheckedCollectives::all_reduce_async(*group_, m.join_flag, ReduceOp::Max);
  } catch (const std::exception& e) {
    if (group_->healthy()) throw;
    m.recover(*this, group_->failure().empty() ? std::string(e.what()) : group_->failure(), Clock::now(), false);
  }
}

}  // namespace mixtrain::distributed
