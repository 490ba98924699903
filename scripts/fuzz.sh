#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang, AddressSanitizer + UndefinedBehaviorSanitizer)
# into build-fuzz/ (or $MT_FUZZ_BUILD_DIR) and runs each for $MT_FUZZ_SECONDS seconds (default 20)
# from its seed corpus in tests/fuzz/corpus/<target>/, $MT_FUZZ_PARALLEL targets at a time (default:
# the number of CPUs; each runs on one thread). New inputs go to <build>/corpus/<target>/, never into
# the repository; a finding (crash, sanitizer report, leak, timeout) fails the run with the
# reproducer saved as <build>/artifacts/<target>-crash-* and a non-zero exit.
# A build directory already configured with -DMIXTRAIN_FUZZ=ON (CI's sanitizer build, .ci/run) is
# used as it is: the fuzz targets are built there, beside the tests, instead of in a build of their own.
#   scripts/fuzz.sh                           the short run CI does (9 targets x 20 s)
#   MT_FUZZ_SECONDS=600 scripts/fuzz.sh       a longer run
#   MT_FUZZ_TARGETS="safetensors" scripts/fuzz.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MT_FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=${MT_FUZZ_SECONDS:-20}
targets=${MT_FUZZ_TARGETS:-"safetensors checkpoint json_state plot_log csv idx loader_state scheduler_state tuning_file"}
jobs=${MT_JOBS:-$(nproc)}
parallel=${MT_FUZZ_PARALLEL:-$(nproc)}

if [ -f "$build/CMakeCache.txt" ] && grep -q '^MIXTRAIN_FUZZ:BOOL=ON' "$build/CMakeCache.txt"; then
  echo "fuzz: using the fuzz-enabled build in $build"
else
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
fi
build_targets=()
for t in $targets; do build_targets+=(--target "fuzz_$t"); done
cmake --build "$build" -j "$jobs" "${build_targets[@]}"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export OMP_NUM_THREADS=1
mkdir -p "$build/artifacts"

# One target: its log in <build>/fuzz_<target>.log, its exit status in <build>/fuzz_<target>.rc.
fuzz_one() {
  local t=$1 rc=0
  mkdir -p "$build/corpus/$t"
  "$build/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -artifact_prefix="$build/artifacts/$t-" -print_final_stats=1 \
    "$build/corpus/$t" "$root/tests/fuzz/corpus/$t" >"$build/fuzz_$t.log" 2>&1 || rc=$?
  echo "$rc" >"$build/fuzz_$t.rc"
}

echo "fuzz: ${targets} for ${seconds}s each, ${parallel} at a time"
running=0
for t in $targets; do
  rm -f "$build/fuzz_$t.rc"
  fuzz_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$parallel" ]; then wait -n || true; running=$((running - 1)); fi
done
wait

failed=0
for t in $targets; do
  rc=$(cat "$build/fuzz_$t.rc" 2>/dev/null || echo 1)
  echo "fuzz: $t: $(grep -E "^stat::number_of_executed_units" "$build/fuzz_$t.log" | awk '{print $2}') executions, exit $rc"
  grep -E "^SUMMARY|ERROR" "$build/fuzz_$t.log" || true
  if [ "$rc" -ne 0 ]; then
    tail -n 40 "$build/fuzz_$t.log" >&2
    echo "fuzz: $t found a problem (log: $build/fuzz_$t.log, reproducer in $build/artifacts/)" >&2
    failed=1
  fi
done
exit "$failed"
