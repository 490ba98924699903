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

// Reads a log through mixtrain's bounded reader (a FIFO, a device or a directory is refused at
// once); a line that is not a JSON object with an integer "step" and a numeric (or null) "loss",
// or whose "scale" is not positive, throws mixtrain::Error naming the file and line, and so does
// an empty log.
TrainLog read_train_log(const std::string& path);
// One line of a log, checked as read_train_log does; `where` ("FILE:LINE") starts its messages.
// Blank lines add nothing.
void add_train_log_line(TrainLog& log, const std::string& line, const std::string& where);

// The SVG of a log: every coordinate in it is a finite number, whatever the values (a loss of
// 1e308 beside -1e308, steps 2^60 and 2^60 + 256).
std::string train_log_svg(const TrainLog& log, const std::string& title);

}  // namespace mixtrain::cli
