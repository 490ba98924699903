// Trains a feed-forward network with mixtrain's public API, under AMP by default.
//   mlp                                   Fashion-MNIST classifier (dataset-fashion-mnist)
//   mlp --csv FILE --target COL           regressor on a CSV's columns
//   mlp --synthetic                       215 -> 1 regressor on generated data (no files needed)
// Options: --precision fp32|fp16|bf16 (fp16) --device cpu|cuda (cuda when present) --steps N
//          --batch-size N --lr X --seed N --hidden W1,W2,... --log-every K --data-dir DIR
#include <iostream>
#include <sstream>
#include <string>

#include "common/flags.h"
#include "mlp/mlp_trainer.h"

namespace ex = mixtrain::examples;

namespace {

const char* kUsage =
    "usage: mlp [--synthetic | --csv FILE --target COL] [--data-dir DIR] [--precision fp32|fp16|bf16]\n"
    "           [--device cpu|cuda] [--steps N] [--batch-size N] [--lr X] [--seed N] [--hidden W1,W2,...]\n"
    "           [--log-every K]\n";

ex::MlpConfig parse_args(int argc, char** argv) {
  ex::MlpConfig c;
  c.log = &std::cout;
  ex::FlagReader flags("mlp", kUsage, argc, argv);
  std::string f;
  while (flags.next(f)) {
    if (ex::read_run_flag(flags, f, c)) continue;
    if (f == "--synthetic") {
      c.task = ex::MlpTask::Synthetic;
    } else if (f == "--csv") {
      c.task = ex::MlpTask::Csv;
      c.csv_path = flags.value();
    } else if (f == "--target") {
      c.target_column = flags.value();
    } else if (f == "--data-dir") {
      c.data_dir = flags.value();
    } else if (f == "--hidden") {
      std::istringstream is(flags.value());
      std::string w;
      c.hidden.clear();
      while (std::getline(is, w, ',')) c.hidden.push_back(flags.parse<int64_t>(w));
    } else {
      flags.unknown();
    }
  }
  MT_CHECK(c.task != ex::MlpTask::Csv || !c.target_column.empty(), "mlp: --csv needs --target COL");
  MT_CHECK(c.task == ex::MlpTask::Csv || c.target_column.empty(), "mlp: --target needs --csv FILE");
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  return ex::run_program([&] { ex::run_mlp(parse_args(argc, argv)); });
}
