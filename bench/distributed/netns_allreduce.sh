#!/usr/bin/env bash
# All-reduce bus bandwidth between two hosts made of network namespaces joined by a veth pair
# (10.200.0.1 and 10.200.0.2), the job started with torchrun's variables alone: rank 0 serves the
# rendezvous store at MASTER_ADDR:MASTER_PORT. Prints mixtrain's figure beside Gloo's own on the
# same link. Root only; removes the namespaces however it ends.
#   bench/distributed/netns_allreduce.sh [build dir] [MiB] [iterations]
set -euo pipefail
build=${1:-build}
mib=${2:-25}
iters=${3:-20}
bench=$(readlink -f "$build/bench/bench_dist_allreduce")
[ -x "$bench" ] || { echo "no $bench: configure with -DMIXTRAIN_BUILD_BENCH=ON and build bench_dist_allreduce" >&2; exit 1; }
a=mtbench-$$-a b=mtbench-$$-b
trap 'ip netns del $a 2>/dev/null || true; ip netns del $b 2>/dev/null || true' EXIT
ip netns add $a
ip netns add $b
ip link add eth0 netns $a type veth peer name eth0 netns $b
ip -n $a addr add 10.200.0.1/24 dev eth0
ip -n $b addr add 10.200.0.2/24 dev eth0
for ns in $a $b; do ip -n $ns link set lo up; ip -n $ns link set eth0 up; done
common=(env -u MIXTRAIN_STORE WORLD_SIZE=2 LOCAL_WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=10.200.0.1 MASTER_PORT=29510
        GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1)
ip netns exec $b "${common[@]}" RANK=1 "$bench" "$mib" "$iters" &
peer=$!
ip netns exec $a "${common[@]}" RANK=0 "$bench" "$mib" "$iters"
wait $peer
