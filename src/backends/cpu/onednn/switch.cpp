// Whether the CPU backend offers its GEMMs and convolutions to oneDNN (onednn.h): the build, the
// environment's MIXTRAIN_ONEDNN and the tests' override. Built with or without oneDNN.
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/onednn/onednn.h"
#include "mixtrain/base/error.h"
#include "mixtrain/config.h"

namespace mixtrain::backends::cpu {

namespace {

std::atomic<int> override_mode{-1};

}  // namespace

namespace onednn {
// Bumped by the oneDNN kernels once per call they run (engine.cpp).
std::atomic<int64_t> calls{0};
}  // namespace onednn

bool onednn_built() {
#if defined(MIXTRAIN_WITH_ONEDNN)
  return true;
#else
  return false;
#endif
}

OneDnnMode parse_onednn_mode(const char* value) {
  if (value == nullptr || std::strcmp(value, "1") == 0) return OneDnnMode::Sized;
  if (std::strcmp(value, "0") == 0) return OneDnnMode::Off;
  if (std::strcmp(value, "all") == 0) return OneDnnMode::All;
  MT_ERROR("MIXTRAIN_ONEDNN must be 0 (the CPU's own kernels only), 1 (oneDNN for GEMMs and convolutions above "
           "their size thresholds, the default) or all (oneDNN at every size), got '",
           value, "'");
}

OneDnnMode onednn_mode() {
  if (!onednn_built()) return OneDnnMode::Off;
  const int forced = override_mode.load(std::memory_order_relaxed);
  if (forced >= 0) return static_cast<OneDnnMode>(forced);
  static const OneDnnMode from_env = parse_onednn_mode(std::getenv("MIXTRAIN_ONEDNN"));
  return from_env;
}

void set_onednn_override(int mode) {
  MT_CHECK(mode >= -1 && mode <= 2, "set_onednn_override: expected -1 (environment), 0 (off), 1 (sized) or 2 (all), got ",
           mode);
  override_mode.store(mode, std::memory_order_relaxed);
}

int64_t onednn_calls() { return onednn::calls.load(std::memory_order_relaxed); }

}  // namespace mixtrain::backends::cpu
