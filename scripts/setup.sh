#!/usr/bin/env bash
# Sets up a fresh Debian machine and builds mixtrain into build/ (or $MT_BUILD_DIR):
# installs the Debian packages it needs (when missing), configures with CMake and builds.
# Extra arguments go to the CMake configure step (e.g. -DMIXTRAIN_SANITIZE=address,undefined).
# MT_BUILD_DIR, MT_JOBS and MT_TARGETS choose the build directory, parallel jobs and targets.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MT_BUILD_DIR:-$root/build}

packages=(build-essential cmake libeigen3-dev nlohmann-json3-dev libgtest-dev libgmock-dev
          libbenchmark-dev zlib1g-dev dataset-fashion-mnist fortunes ccache libgloo-dev libcli11-dev
          libdnnl-dev ocl-icd-opencl-dev)
# libdnnl-dev: oneDNN, the CPU's GEMM and convolution engine (optional; its CMake config needs
# the OpenCL loader, which Debian only recommends).
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

jobs=${MT_JOBS:-$(nproc)}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
# MT_TARGETS (space-separated) builds only those targets (CI's thread-sanitizer stage).
targets=()
for t in ${MT_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j "$jobs" "${targets[@]}"
