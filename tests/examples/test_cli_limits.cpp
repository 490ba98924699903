// The mixtrain command at the ends of its ranges: `memory --fit` says plainly where its search
// stops, batch 1 works and a batch too large for int64 byte counts is an Error (never negative
// bytes), `train` stops naming the step when its loss can no longer be finite, and a bad
// MIXTRAIN_RANK_BATCHES is an error without a launcher too.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "examples/cli_run.h"
#include "memory_predict.h"
#include "support/testing.h"

using mixtrain::testing::CliRun;
using mixtrain::testing::run_mixtrain;

TEST(CliLimits, FitSaysWhereItsSearchStops) {
  // More memory than any batch up to the search's end needs: it once said "batch 1048576 is the
  // largest that fits; batch 0 would peak at 0 B".
  const CliRun table = run_mixtrain("memory mlp --fit 1000000TiB");
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_EQ(table.out.find("batch 0"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("batch " + std::to_string(mixtrain::cli::kMaxFitBatch) + " fits"), std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find("larger batches were not tried"), std::string::npos) << table.out;
  const CliRun json = run_mixtrain("memory mlp --fit 1000000TiB --json");
  ASSERT_EQ(json.code, 0) << json.err;
  const nlohmann::json doc = nlohmann::json::parse(json.out);
  EXPECT_EQ(doc["fit_batch_size"], mixtrain::cli::kMaxFitBatch);
  EXPECT_TRUE(doc["fit_over_batch_size"].is_null());
  EXPECT_EQ(doc["fit_search_max_batch_size"], mixtrain::cli::kMaxFitBatch);
  // 8 GiB for the small MLP: found below the search's end, with the next batch named.
  const CliRun eight = run_mixtrain("memory mlp --fit 8GiB --json");
  ASSERT_EQ(eight.code, 0) << eight.err;
  const nlohmann::json e = nlohmann::json::parse(eight.out);
  EXPECT_EQ(e["fit_over_batch_size"].get<int64_t>(), e["fit_batch_size"].get<int64_t>() + 1);
  // --fit keeps the reserved bytes (never below the allocated ones) within the budget.
  EXPECT_GT(std::max(e["fit_over_peak_bytes"].get<int64_t>(), e["fit_over_reserved_bytes"].get<int64_t>()),
            int64_t{8} << 30);
}

TEST(CliLimits, BatchOneWorksAndHugeBatchesAreErrors) {
  for (const char* model : {"mlp", "unet", "transformer"}) {
    SCOPED_TRACE(model);
    const CliRun one = run_mixtrain(std::string("memory ") + model + " --batch-size 1 --json");
    ASSERT_EQ(one.code, 0) << one.err;  // mlp once said "synthetic_samples must be at least 8, got 4"
    EXPECT_EQ(nlohmann::json::parse(one.out)["batch_size"], 1);
  }
  // 2^52 and 2^51 samples: their bytes pass 2^63 - 1 (the JSON once held negative persistent
  // bytes, and a peak lower than at half the batch); INT64_MAX overflows the sample count itself.
  for (const char* batch : {"4503599627370496", "2251799813685248", "9223372036854775807"}) {
    SCOPED_TRACE(batch);
    const CliRun r = run_mixtrain(std::string("memory mlp --json --batch-size ") + batch);
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.err.find("2^63"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

TEST(CliLimits, TrainingThatCannotRecoverStopsNamingTheStep) {
  // 1e30 is a rate the update applies; the next forward overflows. fp16 (the default): every
  // later loss is NaN with finite, huge weights, which no loss scale mends. The run once skipped
  // ~142 steps backing off to the scale's floor (and with --steps 100 exited 0 on "final loss
  // nan"); now ten NaN losses in a row stop it, in seconds.
  const auto start = std::chrono::steady_clock::now();
  const CliRun r = run_mixtrain("train mlp --synthetic --precision fp16 --lr 1e30 --steps 100");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.err.find("step 11: the training loss has been inf or NaN on every step since step 2 (10 in a row"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("Lower the learning rate (mixtrain train: --lr) or train in bf16"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("final loss"), std::string::npos) << r.out;
  EXPECT_LT(seconds, 60.0);
  const CliRun fp32 = run_mixtrain("train mlp --synthetic --precision fp32 --lr 1e30");
  EXPECT_EQ(fp32.code, 1) << fp32.out;
  EXPECT_NE(fp32.err.find("step 2: the training loss is"), std::string::npos) << fp32.err;
}

TEST(CliLimits, ARateTheUpdateCannotHoldStopsAtStepOneAndSavesNothing) {
  // 1e308 and 1e305 are inf in float32: the weights once became NaN at step 1 and the run ended
  // with exit 0 (fp16 skipping every later step; all weights NaN in the checkpoint).
  const mixtrain::testing::TempDir tmp;
  for (const char* run : {"--lr 1e308 --steps 100", "--lr 1e305 --precision fp16 --steps 20",
                          "--lr 3e38 --precision bf16 --steps 3", "--lr 3e38 --precision fp32 --steps 3"}) {
    SCOPED_TRACE(run);
    const CliRun r = run_mixtrain(std::string("train mlp --synthetic ") + run + " --save " + tmp.path + "/ckpt");
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.err.find("step 1: AdamW.step: lr"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("final loss"), std::string::npos) << r.out;
    EXPECT_FALSE(std::filesystem::exists(tmp.path + "/ckpt"));
  }
}

TEST(CliLimits, ABadRankBatchesValueIsAnErrorWithoutALauncher) {
  ::setenv("MIXTRAIN_RANK_BATCHES", "bogus", 1);
  const CliRun r = run_mixtrain("train mlp --synthetic --steps 1");
  ::unsetenv("MIXTRAIN_RANK_BATCHES");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.err.find("MIXTRAIN_RANK_BATCHES"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("bogus"), std::string::npos) << r.err;
}
