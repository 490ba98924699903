#pragma once
// Test hook: called by save_checkpoint after each stage ("model.safetensors",
// "optimizer.safetensors", "trainer.json", "staged") with the staging directory; a hook that
// throws simulates a failure at that point. Not part of the public API.
#include <functional>
#include <string>

namespace mixtrain::io::detail {

using SaveHook = std::function<void(const std::string& stage)>;
void set_save_hook(SaveHook hook);

}  // namespace mixtrain::io::detail
