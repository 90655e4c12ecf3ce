#!/usr/bin/env bash
# `make demo`: a 4-worker data-parallel job on this machine that trains through a
# planned preemption, an unplanned kill, a frozen worker and re-joins (the chaos
# schedule in examples/fmnist/demo-chaos.jsonl), then its report: the summary
# here, the JSON and a PNG in out/, and the allreduce figures behind it.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
tide=$build/tide
trainer=$build/examples/fmnist/fmnist-train
mkdir -p out
echo "== Tide $($tide version | cut -d' ' -f2): an elastic job of 2..4 workers training an MLP on Fashion-MNIST"
echo "   chaos: preempt (2 s notice), join, kill -9, join, SIGSTOP, join"
OPENBLAS_NUM_THREADS=1 $tide run -n 4 --min 2 --max 4 --no-respawn \
  --chaos examples/fmnist/demo-chaos.jsonl --report out/report.json -- \
  "$trainer" --epochs 20
$tide report out/report.json --png out/report.png | tail -n 1   # the summary was printed above
echo
echo "== allreduce, float32 sum, 4 ranks on this machine's $(nproc) cores (shared memory)"
$tide bench allreduce --np 4 --transport shm --min-bytes 4096 --max-bytes 16777216
echo
echo "Report: out/report.json, out/report.png. Figures against Open MPI and Gloo,"
echo "measured side by side: docs/performance.md"
