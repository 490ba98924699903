#!/usr/bin/env bash
# Speed under load: times one training alone and N of the same training at once (-n, default 2),
# and prints each binary's median times and the shared speed as a fraction of the alone speed
# (1.0: no loss; 1/N: a fair share of the cores when the alone run keeps them all busy).
#
#   bench/load_pair.sh [-r ROUNDS] [-n N] [BIN ...] [-- TRAIN ARGS]
#
# BIN defaults to build/apps/mixtrain/mixtrain; TRAIN ARGS to `train transformer --synthetic
# --steps 30`. With several binaries the rounds alternate between them (alone, pair, next binary),
# so a before/after comparison shares the same background load. The environment passes through,
# so `OMP_NUM_THREADS=1 bench/load_pair.sh` measures that setting. Run it on a quiet machine:
# other work running meanwhile lowers both figures.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=5
together=2
bins=()
while [ $# -gt 0 ]; do
  case "$1" in
    -r) rounds=$2; shift 2 ;;
    -n) together=$2; shift 2 ;;
    --) shift; break ;;
    *) bins+=("$(realpath "$1")"); shift ;;
  esac
done
[ ${#bins[@]} -eq 0 ] && bins=("$root/build/apps/mixtrain/mixtrain")
train_args=("$@")
[ ${#train_args[@]} -eq 0 ] && train_args=(train transformer --synthetic --steps 30)
for b in "${bins[@]}"; do
  [ -x "$b" ] || { echo "load_pair: $b is not an executable" >&2; exit 2; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

now() { date +%s.%N; }
# Runs BIN with the training arguments; prints its wall time in seconds.
timed_run() {
  local t0 t1
  t0=$(now)
  "$1" "${train_args[@]}" >/dev/null 2>"$work/err.$$.$BASHPID" || {
    echo "load_pair: $1 ${train_args[*]} failed:" >&2; cat "$work/err.$$.$BASHPID" >&2; exit 1; }
  t1=$(now)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", b - a }' 
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "load_pair: ${train_args[*]}, $rounds rounds, $together at once, $(nproc) CPUs, OMP_NUM_THREADS=${OMP_NUM_THREADS-unset}"
for ((r = 1; r <= rounds; ++r)); do
  for i in "${!bins[@]}"; do
    b=${bins[$i]}
    timed_run "$b" >>"$work/alone.$i"
    pids=()
    for ((k = 1; k <= together; ++k)); do
      timed_run "$b" >"$work/p$k" &
      pids+=($!)
    done
    wait "${pids[@]}"
    shared=()
    for ((k = 1; k <= together; ++k)); do cat "$work/p$k" >>"$work/shared.$i"; shared+=("$(cat "$work/p$k")"); done
    printf '  round %d %s: alone %.2f s, %d at once %s s\n' "$r" "$(basename "$(dirname "$b")")/$(basename "$b")" \
      "$(tail -1 "$work/alone.$i")" "$together" "${shared[*]}"
  done
done
for i in "${!bins[@]}"; do
  alone=$(median <"$work/alone.$i")
  shared=$(median <"$work/shared.$i")
  printf '%s\n  alone %.2f s (median of %d), %d at once %.2f s (median of %d), shared speed %.3fx alone\n' \
    "${bins[$i]}" "$alone" "$rounds" "$together" "$shared" $((together * rounds)) \
    "$(awk -v a="$alone" -v s="$shared" 'BEGIN { print a / s }')"
done
