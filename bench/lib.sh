# bench/lib.sh - sourced by the bench scripts: the repository root, the build
# folder named by a script's first argument, and checks that stop a script with
# a message naming what is missing (exit 2) before it measures anything.
#
#   . "$(dirname "$0")/lib.sh"
#   build=$(bench_build_dir "${1:-}")
#   bench_require "$build/tide" ...
#   bench_require_cmd jq

bench_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bench_name=bench/$(basename "$0")

# The build folder: BUILD (default "build"), relative to the repository root.
bench_build_dir() {
  local b=${1:-build}
  case $b in /*) echo "$b" ;; *) echo "$bench_root/$b" ;; esac
}

# Every FILE must be an executable the build made.
bench_require() {
  local f
  for f in "$@"; do
    [ -x "$f" ] || { echo "$bench_name: $f is missing (make build first)" >&2; exit 2; }
  done
}

# Every COMMAND must be on PATH (scripts/install-deps.sh installs them).
bench_require_cmd() {
  local c
  for c in "$@"; do
    command -v "$c" >/dev/null || { echo "$bench_name: needs $c (scripts/install-deps.sh)" >&2; exit 2; }
  done
}
