// libFuzzer target: JSON -> DataLoader::load_state_dict, then a few batches and a skip whose size
// comes from the input's first byte. Only mixtrain::Error may escape; a rejected state leaves the
// position as it was; the loader is destroyed cleanly whatever happened (an abort is a finding).
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/json_limits.h"
#include "mixtrain/mixtrain.h"

namespace mt = mixtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  static const mt::data::TensorDataset ds(mt::arange(0, 10).reshape({10, 1}), mt::arange(0, 10));
  const auto options = mt::data::DataLoaderOptions().batch_size(3).shuffle(data[0] & 1).seed(5).num_workers(data[0] & 2 ? 1 : 0);
  mt::data::DataLoader loader(ds, options);
  try {
    const nlohmann::json doc = mt::detail::parse_json_bounded(text, "fuzz");
    const mt::data::SamplerPosition before = loader.position();
    try {
      loader.load_state_dict(doc);
    } catch (const mt::Error&) {
      if (loader.position().epoch != before.epoch || loader.position().batch != before.batch) __builtin_trap();
      throw;
    }
    // Skips of 0 .. 2^62, then batches across the epoch's end.
    const int64_t skip = data[0] >= 4 ? int64_t{1} << (data[0] % 63) : 0;
    try {
      loader.skip(skip);
    } catch (const mt::Error&) {
    }
    for (int i = 0; i < 5; ++i) {
      const mt::data::SamplerPosition at = loader.position();
      try {
        loader.next_batch();
      } catch (const mt::Error&) {
        if (loader.position().epoch != at.epoch || loader.position().batch != at.batch) __builtin_trap();
      }
    }
  } catch (const mt::Error&) {
  }
  return 0;
}
