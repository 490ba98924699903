// The MLP example's trainer: short runs whose loss must fall.
#include <sys/stat.h>

#include <fstream>
#include <numeric>

#include "mlp/mlp_trainer.h"
#include "support/testing.h"

namespace ex = mixtrain::examples;

namespace {
double mean_of(const std::vector<double>& v, size_t begin, size_t end) {
  return std::accumulate(v.begin() + static_cast<std::ptrdiff_t>(begin), v.begin() + static_cast<std::ptrdiff_t>(end), 0.0) /
         static_cast<double>(end - begin);
}
}  // namespace

TEST(MlpExample, SyntheticRegressionLossFalls) {
  ex::MlpConfig c;
  c.task = ex::MlpTask::Synthetic;
  c.synthetic_samples = 2048;
  c.hidden = {128, 64};
  c.steps = 100;
  c.batch_size = 64;
  c.seed = 3;
  const ex::MlpResult r = ex::run_mlp(c);
  ASSERT_EQ(r.losses.size(), 100u);
  const double start = mean_of(r.losses, 0, 5), end = mean_of(r.losses, 90, 100);
  // Targets are standardised, so the untrained model starts near 1; the teacher is learnable.
  EXPECT_GT(start, 0.5);
  EXPECT_LT(end, 0.25 * start) << "start " << start << " end " << end;
  EXPECT_LT(r.test_loss, 0.5 * start);
  EXPECT_EQ(r.test_accuracy, -1);
  EXPECT_EQ(r.parameters, 215 * 128 + 128 + 128 * 64 + 64 + 64 + 1);

  // Same seed, same run.
  EXPECT_EQ(ex::run_mlp(c).losses, r.losses);
}

TEST(MlpExample, CsvRegressionLossFalls) {
  const std::string path = ::testing::TempDir() + "mixtrain_mlp_test_" + std::to_string(::getpid()) + ".csv";
  {
    std::ofstream out(path);
    out << "u,v,target\n";
    mixtrain::Generator gen(5);
    for (int i = 0; i < 512; ++i) {
      const double u = gen.next_normal(), v = gen.next_normal();
      out << u * 100 << "," << v << "," << (3 * u - v * v) << "\n";
    }
  }
  ex::MlpConfig c;
  c.task = ex::MlpTask::Csv;
  c.csv_path = path;
  c.target_column = "target";
  c.steps = 150;
  c.batch_size = 32;
  c.lr = 3e-3;
  const ex::MlpResult r = ex::run_mlp(c);
  EXPECT_LT(mean_of(r.losses, 140, 150), 0.25 * mean_of(r.losses, 0, 5));
  EXPECT_EQ(r.test_size, 51);  // 10% of 512, rounded
}

TEST(MlpExample, FashionMnistIfInstalled) {
  struct stat st {};
  if (::stat(mixtrain::data::kFashionMnistDir, &st) != 0) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  ex::MlpConfig c;
  c.steps = 150;
  const ex::MlpResult r = ex::run_mlp(c);
  // ln(10) = 2.30 at chance; a linear model alone reaches ~84% on this data set.
  EXPECT_GT(mean_of(r.losses, 0, 3), 1.8);
  EXPECT_LT(mean_of(r.losses, 140, 150), 0.9);
  EXPECT_GT(r.test_accuracy, 0.7);
  EXPECT_EQ(r.test_size, 10000);
}

TEST(MlpExample, RejectsBadConfiguration) {
  ex::MlpConfig c;
  c.task = ex::MlpTask::Synthetic;
  c.steps = 0;
  EXPECT_THROW(ex::run_mlp(c), mixtrain::Error);
  c.steps = 1;
  c.lr = -1;
  EXPECT_THROW(ex::run_mlp(c), mixtrain::Error);
  c.lr = 1e-3;
  c.task = ex::MlpTask::Csv;
  EXPECT_THROW(ex::run_mlp(c), mixtrain::Error);
}
