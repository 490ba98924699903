// libFuzzer target: arbitrary bytes as a safetensors file. Only mixtrain::Error may escape.
#include <cstddef>
#include <cstdint>
#include <string>

#include "mixtrain/mixtrain.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    const mixtrain::io::SafetensorsFile f = mixtrain::io::parse_safetensors(bytes, "fuzz");
    // What was accepted must describe itself consistently and survive a round trip.
    const mixtrain::io::SafetensorsFile again =
        mixtrain::io::parse_safetensors(mixtrain::io::serialize_safetensors(f.tensors, f.metadata), "round trip");
    if (again.tensors.size() != f.tensors.size()) __builtin_trap();
  } catch (const mixtrain::Error&) {
  }
  return 0;
}
