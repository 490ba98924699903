#pragma once
// What a Trainer owns (trainer.h), private to src/train: one struct so that trainer.cpp (the
// step) and trainer_run.cpp (the launcher's parts and the loop) share it.
#include <memory>

#include <nlohmann/json.hpp>

#include "mixtrain/amp/fp8.h"
#include "mixtrain/amp/grad_scaler.h"
#include "mixtrain/distributed/ddp.h"
#include "mixtrain/distributed/elastic.h"
#include "mixtrain/distributed/rank_shares.h"
#include "mixtrain/memory/plan_cache.h"
#include "mixtrain/train/trainer.h"
#include "train/finite_params.h"
#include "train/trainer_state.h"

namespace mixtrain::train {

struct Trainer::Parts {
  Parts(nn::Module& model, const TrainOptions& options, const LrSchedule& schedule);

  const TrainOptions& options;    // the Trainer's
  distributed::LaunchEnv launch;  // world size 1 when planned
  amp::GradScaler scaler;
  // Declared before the optimizer state: a ZeRO optimizer refers to the DDP it shards, so the DDP
  // must outlive it (members are destroyed in reverse order).
  std::unique_ptr<nn::DistributedDataParallel> ddp;
  // AdamW and its schedule; sharded (ZeRO-1) once the DDP exists. FP8: the Linear layers' scaling
  // state, saved and loaded with the rest.
  TrainerState state;
  std::unique_ptr<amp::Fp8Scaling> fp8;
  std::unique_ptr<distributed::ElasticAgent> agent;  // --elastic: survivors go on without a restart
  nlohmann::json received_step;  // elastic: the record of a step this rank took from another
  bool rollback = false;         // elastic ZeRO: the membership changed, so back to the last checkpoint
  // The shares this rank's rows were split by: the launcher's, the options', or DDP's latest.
  distributed::RankShares shares;
  std::unique_ptr<FiniteParams> finite;
  bool params_finite = true;  // the last step's scan
  std::unique_ptr<memory::PlanCache> plans;  // TrainOptions::memory_plan

  // ZeRO-1 across the ranks of a launched job (a planned rank's shard is TrainerState's).
  bool sharded() const { return options.zero_stage > 0 && launch.world_size > 1; }

};

}  // namespace mixtrain::train
