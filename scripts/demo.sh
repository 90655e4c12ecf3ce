#!/usr/bin/env bash
# `make demo`: a 4-worker data-parallel job on this machine, then the allreduce
# figures behind it. Until the elastic runtime lands (issue 3), the job has fixed
# membership; the chaos schedule (preempt, kill, freeze, re-join) comes with it.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
tide=$build/tide
trainer=$build/examples/fmnist/fmnist-train
echo "== Tide $($tide version | cut -d' ' -f2): 4 workers training an MLP on Fashion-MNIST"
echo "   (tide run -n 4; gradients averaged with tide_allreduce over shared memory)"
if [ -x "$trainer" ]; then
  start=$(date +%s.%N)
  OPENBLAS_NUM_THREADS=1 $tide run -n 4 -- "$trainer" ${TIDE_DEMO_ARGS:-}
  end=$(date +%s.%N)
  printf '   wall time: %.1f s\n' "$(echo "$end - $start" | bc)"
else
  echo "   ($trainer is not built; skipping the training run)"
fi
echo
echo "== allreduce, float32 sum, 4 ranks on this machine's $(nproc) cores (shared memory)"
$tide bench allreduce --np 4 --transport shm --min-bytes 4096 --max-bytes 16777216
echo
echo "== the same over TCP loopback"
$tide bench allreduce --np 4 --transport tcp --min-bytes 4096 --max-bytes 16777216
echo
echo "Figures against Open MPI and Gloo, measured side by side: docs/performance.md"
