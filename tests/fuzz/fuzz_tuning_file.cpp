// libFuzzer target: bytes -> the GEMM tuning file reader. Only mixtrain::Error may escape; an
// accepted table is written back and reads back the same (what the writer writes, its reader
// accepts).
#include <cstddef>
#include <cstdint>
#include <string>

#include "backends/gemm_tuning_file.h"
#include "fuzz_files.h"
#include "mixtrain/mixtrain.h"

namespace mt = mixtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mt::fuzz::input_file("tuning.json", std::string(reinterpret_cast<const char*>(data), size));
  try {
    const mt::backends::GemmTuningTable t = mt::backends::read_gemm_tuning(path);
    const std::string copy = (mt::fuzz::work_dir() / "copy.json").string();
    mt::backends::write_gemm_tuning(copy, t);
    const mt::backends::GemmTuningTable back = mt::backends::read_gemm_tuning(copy);
    if (back.device != t.device || back.library_version != t.library_version || back.choices != t.choices)
      __builtin_trap();
  } catch (const mt::Error&) {
  }
  return 0;
}
