// libFuzzer target: a training log (`mixtrain train --log`) -> `mixtrain plot`'s reader and SVG.
// Only mixtrain::Error may escape, the drawing must finish (bounded axes), and no coordinate in
// the SVG may be NaN or infinite.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_files.h"
#include "mixtrain/mixtrain.h"
#include "plot.h"

namespace mt = mixtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mt::fuzz::input_file("log.jsonl", std::string(reinterpret_cast<const char*>(data), size));
  try {
    const mt::cli::TrainLog log = mt::cli::read_train_log(path);
    const std::string svg = mt::cli::train_log_svg(log, "fuzz");
    if (svg.find("nan") != std::string::npos || svg.find("inf") != std::string::npos) __builtin_trap();
  } catch (const mt::Error&) {
  }
  return 0;
}
