#!/usr/bin/env bash
# Speed under load: times one training alone and two of the same training at once, and prints
# each binary's median times and the paired speed as a fraction of the alone speed (1.0: no
# loss; 0.5: a fair share of the cores when the alone run keeps them all busy).
#
#   bench/load_pair.sh [-r ROUNDS] [BIN ...] [-- TRAIN ARGS]
#
# BIN defaults to build/apps/mixtrain/mixtrain; TRAIN ARGS to `train transformer --synthetic
# --steps 30`. With several binaries the rounds alternate between them (alone, pair, next binary),
# so a before/after comparison shares the same background load. The environment passes through,
# so `OMP_NUM_THREADS=1 bench/load_pair.sh` measures that setting. Run it on a quiet machine:
# other work running meanwhile lowers both figures.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=5
bins=()
while [ $# -gt 0 ]; do
  case "$1" in
    -r) rounds=$2; shift 2 ;;
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
  echo "$t1 - $t0" | bc -l
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "load_pair: ${train_args[*]}, $rounds rounds, $(nproc) CPUs, OMP_NUM_THREADS=${OMP_NUM_THREADS-unset}"
for ((r = 1; r <= rounds; ++r)); do
  for i in "${!bins[@]}"; do
    b=${bins[$i]}
    timed_run "$b" >>"$work/alone.$i"
    timed_run "$b" >"$work/p1" &
    p1=$!
    timed_run "$b" >"$work/p2" &
    p2=$!
    wait "$p1" "$p2"
    cat "$work/p1" "$work/p2" >>"$work/paired.$i"
    printf '  round %d %s: alone %.2f s, paired %.2f s %.2f s\n' "$r" "$(basename "$(dirname "$b")")/$(basename "$b")" \
      "$(tail -1 "$work/alone.$i")" "$(cat "$work/p1")" "$(cat "$work/p2")"
  done
done
for i in "${!bins[@]}"; do
  alone=$(median <"$work/alone.$i")
  paired=$(median <"$work/paired.$i")
  printf '%s\n  alone %.2f s (median of %d), paired %.2f s (median of %d), paired speed %.3fx alone\n' \
    "${bins[$i]}" "$alone" "$rounds" "$paired" $((2 * rounds)) "$(echo "$alone / $paired" | bc -l)"
done
