#!/usr/bin/env bash
# Runs Tide's allreduce benchmark against its peers in one run, turn by turn
# (../shared/peers/compare-allreduce), for every target the foundation issue names,
# and writes the tables to bench/results/<date>/. Usage: bench/run-all.sh [BUILD]
set -euo pipefail
. "$(dirname "$0")/lib.sh"
here=$bench_root
build=$(bench_build_dir "${1:-}")
peers=${TIDE_PEERS:-$here/../shared/peers}
rounds=${ROUNDS:-5}
out=$here/bench/results/$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$out"
tide=$build/tide
bench_require "$tide"
# (the Gloo peer installs Debian's python3-torch itself when it is missing: run-peer)
run() { # name ranks transport peer
  local name=$1 ranks=$2 transport=$3 peer=$4
  echo "== $name: $ranks ranks, $transport, vs $peer ($rounds rounds)"
  "$peers/compare-allreduce" --ranks "$ranks" --transport "$transport" --peer "$peer" \
    --rounds "$rounds" --min-bytes 4096 --max-bytes 67108864 -- \
    "$tide" bench allreduce --np "$ranks" --transport "$transport" --json | tee "$out/$name.txt"
}
run shm-2-openmpi 2 shm openmpi
run shm-4-openmpi 4 shm openmpi
run tcp-2-openmpi 2 tcp openmpi
[ "${SKIP_GLOO:-0}" = 1 ] || run tcp-2-gloo 2 tcp gloo
echo "results in $out"
