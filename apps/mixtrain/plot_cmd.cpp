// mixtrain plot LOG.jsonl --out FILE.svg
#include <cstdio>
#include <fstream>
#include <iostream>
#include <stdexcept>

#include "commands.h"
#include "common/cli.h"
#include "plot.h"

namespace mixtrain::cli {

int run_plot(const std::vector<std::string>& argv) {
  namespace flags = examples::cli;
  std::string log_path, out_path;
  const auto app = flags::make_app("mixtrain plot", "Draws a training log (mixtrain train --log) as an SVG: the loss "
                                                    "with skipped steps marked, the loss scale and the learning rate.");
  app->add_option("log", log_path, "the JSONL log")->required()->type_name("LOG.jsonl");
  app->add_option("--out", out_path, "the SVG to write")->type_name("FILE.svg")->default_str("LOG.svg");
  if (!flags::parse(*app, argv, std::cout)) return 0;
  if (out_path.empty()) {
    const size_t dot = log_path.rfind('.');
    out_path = (dot == std::string::npos || log_path.find('/', dot) != std::string::npos ? log_path
                                                                                         : log_path.substr(0, dot)) +
               ".svg";
  }
  const TrainLog log = read_train_log(log_path);
  const std::string svg = train_log_svg(log, "training log " + log_path);
  // Written beside and renamed, so a failed write never leaves half a picture.
  const std::string tmp = out_path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!(out << svg) || !(out.flush())) throw std::runtime_error("--out: cannot write " + out_path);
  }
  if (std::rename(tmp.c_str(), out_path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error("--out: cannot write " + out_path);
  }
  std::cout << "wrote " << out_path << " (" << log.step.size() << " steps, " << log.skipped.size() << " skipped)\n";
  return 0;
}

}  // namespace mixtrain::cli
