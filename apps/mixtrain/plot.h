#pragma once
// `mixtrain plot`: a training log (`mixtrain train --log`, one JSON object per step) drawn as an
// SVG: the loss (each step's, and its 20-step mean) with the skipped steps marked, the loss scale
// (log scale) and the learning rate, each against the step.
#include <cstdint>
#include <string>
#include <vector>

namespace mixtrain::cli {

struct TrainLog {
  std::vector<double> step, loss, scale, lr;  // NaN where a line lacks the value (or it was null)
  std::vector<double> skipped;                // the steps the scaler skipped
  bool has_scale = false, has_lr = false;
};

// Reads a log; a line that is not a JSON object with an integer "step" and a numeric (or null)
// "loss" throws std::runtime_error naming the file and line, and so does an empty log.
TrainLog read_train_log(const std::string& path);

std::string train_log_svg(const TrainLog& log, const std::string& title);

}  // namespace mixtrain::cli
