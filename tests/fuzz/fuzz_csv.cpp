// libFuzzer target: bytes -> data::read_csv (target column "y"). Only mixtrain::Error may escape;
// an accepted table's tensors agree with its header and every value is a finite float.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_files.h"
#include "mixtrain/mixtrain.h"

namespace mt = mixtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mt::fuzz::input_file("table.csv", std::string(reinterpret_cast<const char*>(data), size));
  try {
    const mt::data::CsvTable t = mt::data::read_csv(path, "y");
    const int64_t rows = t.target.size(0);
    if (rows < 1 || t.features.size(0) != rows ||
        t.features.size(1) != static_cast<int64_t>(t.feature_names.size()))
      __builtin_trap();
    for (float v : t.features.to_vector<float>())
      if (!std::isfinite(v)) __builtin_trap();
  } catch (const mt::Error&) {
  }
  return 0;
}
