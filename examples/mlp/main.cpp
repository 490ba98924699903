// Trains a feed-forward network with mixtrain's public API, under AMP by default.
//   mlp                                   Fashion-MNIST classifier (dataset-fashion-mnist)
//   mlp --csv FILE --target COL           regressor on a CSV's columns
//   mlp --synthetic                       215 -> 1 regressor on generated data (no files needed)
// `mlp --help` lists every flag with its default.
#include <iostream>

#include "common/cli.h"
#include "mlp/mlp_trainer.h"

namespace ex = mixtrain::examples;

int main(int argc, char** argv) {
  ex::MlpConfig c;
  c.log = &std::cout;
  bool synthetic = false;
  std::string csv;
  auto flags = [&](CLI::App& app) {
    app.add_flag("--synthetic", synthetic, "a 215-input regressor on generated data (no files)");
    app.add_option("--csv", csv, "a regressor on this CSV file's columns (needs --target)")->type_name("FILE")->default_str("none");
    app.add_option("--target", c.target_column, "the CSV column to predict (needs --csv)")
        ->type_name("COL")
        ->default_str("none");
    app.add_option("--data-dir", c.data_dir, "the Fashion-MNIST directory")->type_name("DIR");
    app.add_option("--hidden", c.hidden, "hidden layer widths")
        ->delimiter(',')
        ->check(ex::cli::integer_at_least(1))
        ->type_name("W1,W2")
        ->default_str("256,128; synthetic 1000,500; CSV 64,32");
    ex::cli::add_run_flags(app, c);
  };
  auto run = [&] {
    if (synthetic) c.task = ex::MlpTask::Synthetic;
    if (!csv.empty()) {
      MT_CHECK(!synthetic, "mlp: --csv and --synthetic exclude each other");
      c.task = ex::MlpTask::Csv;
      c.csv_path = csv;
    }
    MT_CHECK(c.task != ex::MlpTask::Csv || !c.target_column.empty(), "mlp: --csv needs --target COL");
    MT_CHECK(c.task == ex::MlpTask::Csv || c.target_column.empty(), "mlp: --target needs --csv FILE");
    ex::run_mlp(c);
  };
  return ex::cli::run_program("mlp", "Trains a feed-forward network under AMP (Fashion-MNIST by default).", argc, argv,
                              flags, run);
}
