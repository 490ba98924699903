#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang, AddressSanitizer + UndefinedBehaviorSanitizer)
# into build-fuzz/ (or $MT_FUZZ_BUILD_DIR) and runs each for $MT_FUZZ_SECONDS seconds (default 20)
# from its seed corpus in tests/fuzz/corpus/<target>/. New inputs go to build-fuzz/corpus/<target>/,
# never into the repository; a finding (crash, sanitizer report, leak, timeout) stops the run with
# the reproducer saved as build-fuzz/artifacts/<target>-crash-* and a non-zero exit.
#   scripts/fuzz.sh                           the short run CI does (9 targets x 20 s)
#   MT_FUZZ_SECONDS=600 scripts/fuzz.sh       a longer run
#   MT_FUZZ_TARGETS="safetensors" scripts/fuzz.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MT_FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=${MT_FUZZ_SECONDS:-20}
targets=${MT_FUZZ_TARGETS:-"safetensors checkpoint json_state plot_log csv idx loader_state scheduler_state tuning_file"}

packages=(clang libclang-rt-dev libomp-dev cmake libeigen3-dev nlohmann-json3-dev zlib1g-dev ccache)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "fuzz: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" -DMIXTRAIN_FUZZ=ON \
  -DMIXTRAIN_SANITIZE=address,undefined -DMIXTRAIN_CUDA=OFF -DMIXTRAIN_NATIVE=OFF -DMIXTRAIN_BUILD_TESTS=OFF \
  -DMIXTRAIN_BUILD_EXAMPLES=OFF -DMIXTRAIN_BUILD_CLI=OFF -DMIXTRAIN_BUILD_BENCH=OFF >/dev/null
jobs=${MT_JOBS:-$(nproc)}
for t in $targets; do cmake --build "$build" -j "$jobs" --target "fuzz_$t"; done

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export OMP_NUM_THREADS=1
mkdir -p "$build/artifacts"
for t in $targets; do
  mkdir -p "$build/corpus/$t"
  echo "fuzz: $t for ${seconds}s"
  rc=0
  "$build/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -artifact_prefix="$build/artifacts/$t-" -print_final_stats=1 \
    "$build/corpus/$t" "$root/tests/fuzz/corpus/$t" >"$build/fuzz_$t.log" 2>&1 || rc=$?
  grep -E "^(#[0-9]+ *DONE|stat::number_of_executed_units|SUMMARY)|ERROR" "$build/fuzz_$t.log" || true
  if [ "$rc" -ne 0 ]; then
    tail -n 40 "$build/fuzz_$t.log" >&2
    echo "fuzz: $t found a problem (log: $build/fuzz_$t.log, reproducer in $build/artifacts/)" >&2
    exit 1
  fi
done
