// Trains a feed-forward network with mixtrain's public API, under AMP by default.
//   mlp                                   Fashion-MNIST classifier (dataset-fashion-mnist)
//   mlp --csv FILE --target COL           regressor on a CSV's columns
//   mlp --synthetic                       215 -> 1 regressor on generated data (no files needed)
// Options: --precision fp32|fp16|bf16 (fp16) --device cpu|cuda (cuda when present) --steps N
//          --batch-size N --lr X --seed N --hidden W1,W2,... --log-every K --data-dir DIR
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>

#include "mlp/mlp_trainer.h"

namespace ex = mixtrain::examples;

namespace {

const char* kUsage =
    "usage: mlp [--synthetic | --csv FILE --target COL] [--data-dir DIR] [--precision fp32|fp16|bf16]\n"
    "           [--device cpu|cuda] [--steps N] [--batch-size N] [--lr X] [--seed N] [--hidden W1,W2,...]\n"
    "           [--log-every K]\n";

template <class T>
T parse(const std::string& flag, const std::string& value) {
  std::istringstream is(value);
  T v{};
  is >> v;
  if (is.fail() || !is.eof()) throw mixtrain::Error("mlp: bad value \"" + value + "\" for " + flag);
  return v;
}

ex::MlpConfig parse_args(int argc, char** argv) {
  ex::MlpConfig c;
  c.log = &std::cout;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw mixtrain::Error("mlp: " + flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--help" || flag == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else if (flag == "--synthetic") {
      c.task = ex::MlpTask::Synthetic;
    } else if (flag == "--csv") {
      c.task = ex::MlpTask::Csv;
      c.csv_path = value();
    } else if (flag == "--target") {
      c.target_column = value();
    } else if (flag == "--precision") {
      c.precision = ex::parse_precision(value());
    } else if (flag == "--device") {
      c.device = ex::parse_device(value());
    } else if (flag == "--data-dir") {
      c.data_dir = value();
    } else if (flag == "--steps") {
      c.steps = parse<int64_t>(flag, value());
    } else if (flag == "--batch-size") {
      c.batch_size = parse<int64_t>(flag, value());
    } else if (flag == "--lr") {
      c.lr = parse<double>(flag, value());
    } else if (flag == "--seed") {
      c.seed = parse<uint64_t>(flag, value());
    } else if (flag == "--log-every") {
      c.log_every = parse<int64_t>(flag, value());
    } else if (flag == "--hidden") {
      std::istringstream is(value());
      std::string w;
      c.hidden.clear();
      while (std::getline(is, w, ',')) c.hidden.push_back(parse<int64_t>(flag, w));
    } else {
      throw mixtrain::Error("mlp: unknown flag " + flag + " (see --help)");
    }
  }
  if (c.task == ex::MlpTask::Csv && c.target_column.empty()) throw mixtrain::Error("mlp: --csv needs --target COL");
  if (c.task != ex::MlpTask::Csv && !c.target_column.empty()) throw mixtrain::Error("mlp: --target needs --csv FILE");
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    ex::run_mlp(parse_args(argc, argv));
    return 0;
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}
