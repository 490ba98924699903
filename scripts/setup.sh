#!/usr/bin/env bash
# Sets up a fresh Debian machine and builds mixtrain into build/ (or $MT_BUILD_DIR): installs the
# Debian packages it needs (when missing), configures with CMake (Ninja when installed) and builds.
#   scripts/setup.sh                 everything: the library, programs, tests and benchmarks
#   scripts/setup.sh mlp mixtrain_cli   only these targets and what they need (the README's
#                                    first line builds just the MLP trainer; without a GPU, and
#                                    in a new build directory, without CUDA)
#   scripts/setup.sh -DMIXTRAIN_SANITIZE=address,undefined   -D... arguments go to CMake
# MT_BUILD_DIR, MT_JOBS and MT_TARGETS (space-separated targets) work as before.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MT_BUILD_DIR:-$root/build}

cmake_args=()
targets=()
for t in ${MT_TARGETS:-}; do targets+=(--target "$t"); done
for a in "$@"; do
  case "$a" in
    -*) cmake_args+=("$a") ;;
    *) targets+=(--target "$a") ;;
  esac
done

# libdnnl-dev: oneDNN, the CPU's GEMM and convolution engine (optional; its CMake config needs
# the OpenCL loader, which Debian only recommends).
packages=(build-essential cmake ninja-build libeigen3-dev nlohmann-json3-dev libgtest-dev libgmock-dev
          libbenchmark-dev zlib1g-dev dataset-fashion-mnist fortunes ccache libgloo-dev libcli11-dev
          libdnnl-dev ocl-icd-opencl-dev)
# A clang build (CXX=clang++: CI's sanitizer stages) also needs clang's sanitizer runtimes and libomp.
case "${CXX:-}" in *clang*) packages+=(clang libclang-rt-dev libomp-dev) ;; esac
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# CUDA. A build of named targets (the README's first line) on a machine without a GPU configures
# without CUDA, and as a unity build (the library's .cpp files compiled in batches: 222 s instead
# of 287 s to the MLP's accuracy on a fresh 2-core machine, docs/TESTING.md): a newcomer training
# the CPU MLP does not wait for nvcc. The build directory remembers that choice
# (cpu-only-for-targets), and a whole build there later (the README's second line) turns both back
# to their defaults: CUDA on wherever the toolkit is installed, so CUDA code keeps being compiled.
# A -DMIXTRAIN_CUDA=... given here always wins.
cpu_only_mark="$build/cpu-only-for-targets"
cuda_chosen=no
cuda_back_on=no
for a in "${cmake_args[@]}"; do case "$a" in -DMIXTRAIN_CUDA=*|-DMIXTRAIN_CUDA:*) cuda_chosen=yes ;; esac; done
has_gpu() { [ -e /dev/nvidia0 ] || nvidia-smi -L >/dev/null 2>&1; }
if [ "$cuda_chosen" = no ]; then
  if [ ${#targets[@]} -gt 0 ] && ! has_gpu && { [ ! -f "$build/CMakeCache.txt" ] || [ -f "$cpu_only_mark" ]; }; then
    echo "setup: no GPU here: configuring without CUDA for these targets (a whole build turns it back on)"
    cmake_args+=(-DMIXTRAIN_CUDA=OFF -DMIXTRAIN_UNITY=ON)
    mkdir -p "$build" && touch "$cpu_only_mark"
  elif [ ${#targets[@]} -eq 0 ] && [ -f "$cpu_only_mark" ]; then
    cmake_args+=(-UMIXTRAIN_CUDA -UMIXTRAIN_UNITY)
    cuda_back_on=yes
  fi
fi

# A build directory keeps the generator it was made with; a new one gets Ninja.
generator=()
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
jobs=${MT_JOBS:-$(nproc)}
cmake "${generator[@]}" -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "${cmake_args[@]}" >/dev/null
if [ "$cuda_back_on" = yes ]; then rm -f "$cpu_only_mark"; fi
cmake --build "$build" -j "$jobs" "${targets[@]}"
