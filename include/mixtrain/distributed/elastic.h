#pragma once
// distributed::ElasticAgent: data-parallel training that goes on when a rank dies or hangs. Under
// DDP every rank holds the same parameters, optimizer, scaler and generator state after each
// step, so the ranks left can agree on a new membership (a new generation of the group, its keys
// under their own prefix in a store that outlives every rank), re-split the global batch by their
// weights and redo the step that failed, with no checkpoint: the run's losses stay those of one
// process on the global batch. A process started later joins at a step boundary and receives the
// state from a member by broadcast. docs/DISTRIBUTED.md, "Elastic membership".
//
//   distributed::ElasticAgent agent(distributed::ElasticOptions().rank_weights(weights));
//   agent.set_state({&model, &opt, &scaler, scheduler.get()});
//   agent.on_change([&](const distributed::MembershipChange& c) {
//     ddp->set_process_group(agent.group());     // and re-split: c.rank, c.weights
//   });
//   agent.start();                               // the first rendezvous, or a joiner's admission
//   agent.run_collectives([&](int) {             // DDP's construction is collectives too
//     ddp = std::make_unique<nn::DistributedDataParallel>(model, agent.group(),
//         nn::DistributedDataParallelOptions().init_sync(!agent.joined_late()));
//   });
//   for (int64_t step = agent.steps() + 1; step <= steps; ++step) {
//     agent.run_step([&](int attempt) { /* seek the data back when attempt > 0; one step */ });
//     agent.step_boundary();                     // admits waiting joiners
//   }
//
// Gloo contexts cannot shrink, so each generation builds a new process group (a rendezvous of its
// members, then Gloo's mesh). CPU ranks only: CUDA tensors on an elastic group are refused (an
// NCCL communicator torn down mid-collective cannot be rebuilt safely here).
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "mixtrain/base/arg.h"
#include "mixtrain/distributed/process_group.h"

namespace mixtrain {
namespace nn {
class Module;
}
namespace optim {
class Optimizer;
class LRScheduler;
}  // namespace optim
namespace amp {
class GradScaler;
}
}  // namespace mixtrain

namespace mixtrain::distributed {

class ElasticOptions {
  // The store every generation rendezvouses in; it must outlive every rank: "tcp://host:port"
  // served by `mixtrain launch --elastic` ($MIXTRAIN_STORE_SERVER=launcher), "file:/dir" or
  // "redis://host:port". Empty: $MIXTRAIN_STORE.
  MT_ARG(std::string, store);
  // Bounds each collective (a peer that stopped is declared gone after it) and each rendezvous;
  // $MIXTRAIN_TIMEOUT_S overrides.
  MT_ARG(std::chrono::milliseconds, timeout) = std::chrono::minutes(5);
  // The first generation's ranks' shares of every batch (one weight per rank; empty: even).
  MT_ARG(std::vector<double>, rank_weights);
  // A joining process's weight (0: $MIXTRAIN_ELASTIC_WEIGHT, else 1).
  MT_ARG(double, weight) = 0.0;
  // Fewer ranks left than this ends the job with an Error.
  MT_ARG(int, min_world_size) = 1;
  // A step that fails this many times in a row (each time with fewer ranks) ends the job, as do
  // this many generations in a row that cannot be formed after a failure.
  MT_ARG(int, max_attempts) = 8;
  // Steps between two looks for waiting joiners (a flag all-reduced behind the step, never waited for).
  MT_ARG(int64_t, join_check_every) = 1;
  MT_ARG(std::string, hostname);  // as ProcessGroupOptions::hostname
  MT_ARG(bool, check_collectives) = true;
};

// What every member holds alike between steps, which a joiner (or a member that was a step
// behind when a rank died) receives from a member by broadcast. Null members are not sent.
struct ElasticState {
  nn::Module* module = nullptr;  // parameters and buffers
  optim::Optimizer* optimizer = nullptr;
  amp::GradScaler* scaler = nullptr;
  optim::LRScheduler* scheduler = nullptr;
  // The trainer's own (its data position, the last step's loss, ...).
  std::function<nlohmann::json()> save_extra;
  std::function<void(const nlohmann::json&)> load_extra;
};

struct MembershipChange {
  int64_t generation = 0;
  int64_t step = 0;           // steps completed when it happened
  std::string cause;          // "failure" or "join"
  std::string reason;         // a failure: what failed
  std::vector<std::string> lost, joined;  // "rank 2 (host h, pid 123)": ranks of the old generation / joiners
  int world_before = 0, world_after = 0;
  int rank = 0;                // this process's rank in the new generation
  std::vector<double> weights;  // every member's weight, in rank order
  double seconds_lost = 0;     // failure: from the start of the interrupted step to the new group, synced
  bool redo = false;           // the interrupted step is redone (false: it had completed, or none ran)
  std::string describe() const;  // one line for logs
};

class ElasticAgent {
 public:
  explicit ElasticAgent(const ElasticOptions& options = ElasticOptions());
  ~ElasticAgent();
  ElasticAgent(const ElasticAgent&) = delete;
  ElasticAgent& operator=(const ElasticAgent&) = delete;

  // Before start(): what moves to a joiner, and who hears of a new generation (called on every
  // member, after the new group is up and the state synced).
  void set_state(ElasticState state);
  void on_change(std::function<void(const MembershipChange&)> fn);
  // Steps already completed (a run resumed from a checkpoint); a joiner learns it from the job.
  void set_steps(int64_t steps) { steps_ = steps; }

  // The first generation's rendezvous (every rank of the launch), or, for a joiner
  // ($MIXTRAIN_ELASTIC_JOIN=1), its admission at a step boundary of the running job and the state.
  // A rank lost in the first rendezvous is dropped as in a step: the others form the next
  // generation (on_change runs) and go on.
  void start();
  bool joined_late() const { return joined_late_; }

  const std::shared_ptr<ProcessGroup>& group() const { return group_; }
  int rank() const { return rank_; }
  int world_size() const { return static_cast<int>(members_.size()); }
  int64_t generation() const { return generation_; }
  const std::vector<double>& weights() const { return weights_; }
  int64_t steps() const { return steps_; }
  const std::vector<MembershipChange>& changes() const { return changes_; }

  // One training step: fn(attempt) issues its collectives on group(). When a peer dies or times
  // out inside it, the members left form the next generation (on_change runs) and fn runs again
  // with attempt + 1 on the same generator state; the trainer moves its data back to the step's
  // batch. Returns true when fn completed here; false when this rank was a step behind the others
  // (a rank died in the step's last collective after some ranks had it complete) and received
  // the step's outcome with the state instead (load_extra got the sender's extra).
  bool run_step(const std::function<void(int attempt)>& fn);
  // Collectives that are not a step (a checkpoint's barriers): redone the same way after a
  // failure, but nothing is counted or sent.
  void run_collectives(const std::function<void(int attempt)>& fn);
  // After a step: admits the processes waiting to join (found by rank 0 one boundary earlier and
  // agreed on with a flag all-reduced behind the step), then on_change runs with them in.
  void step_boundary();

 private:
  struct Impl;
  bool run(const std::function<void(int)>& fn, bool is_step);
  std::unique_ptr<Impl> impl_;
  std::shared_ptr<ProcessGroup> group_;
  std::vector<std::string> members_;  // member ids in rank order
  std::vector<double> weights_;
  int rank_ = 0;
  int64_t generation_ = 0;
  int64_t steps_ = 0;
  bool joined_late_ = false;
  std::vector<MembershipChange> changes_;
};

// A test hook for failures at a chosen point: $MIXTRAIN_TEST_KILL = "RANK:STEP[:RESTART],..."
// kills this process with SIGKILL (as kill -9 would) at the start of STEP when its launch RANK and
// restart count ($MIXTRAIN_RESTART_COUNT, 0 when not given) match one entry. The example
// trainers call it before each step, and mixtrain's train loop with STEP 0 before DDP's
// construction. Its twin for joins: with $MIXTRAIN_TEST_JOIN_AT = STEP, an
// elastic job looks for joiners only from the boundary after STEP on, where its rank 0 waits (up
// to the timeout) for the first one, so that one is admitted at the boundary after STEP + 1,
// whatever the machine's speed.
void kill_if_asked(int64_t step);

}  // namespace mixtrain::distributed
