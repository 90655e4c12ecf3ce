#!/usr/bin/env bash
# Measures the elastic runtime's figures (docs/performance.md, "Elastic runtime"):
# recovery after an unplanned kill, the pause of a planned leave and of a join
# (small and large state), and the goodput of a replayed spot-capacity trace.
# Every run goes through `tide run --chaos/--trace --report --events`; the
# elastic_worker runs also log every completed step, from which the pauses are
# computed. Writes raw files and tables to bench/results/elastic-<date>/.
#
#   bench/elastic.sh [BUILD]
#
# Knobs (environment): CYCLES (5: kill/join/preempt/join cycles per run), RUNS (1:
# runs of each chaos experiment), BIG_COUNT (8388608 doubles: the large state),
# SKIP_CHAOS=1, SKIP_TRACE=1, TRACE (the AWS p3 trace), SPEEDUP (140), NOTICE (120 s / SPEEDUP:
# AWS's spot notice, scaled), TRACE_EPOCHS (fmnist epochs for the trace run).
#
# Definitions:
#   recovery_ms  the report's: from the event (the chaos action) to the first step
#                completed by the group formed after it.
#   reform_ms    the coordinator's (--events): from the first sign of change (a
#                loss, or the first member ready at the agreed step boundary) to
#                the last member of the new generation running (state synced).
#   pause_ms     from elastic_worker's step log: the time between the last step the
#                old generation completed and the first step the new one completed
#                (first rank to log each), minus the median interval between
#                consecutive steps within a generation. It is what the group lost.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
here=$bench_root
build=$(bench_build_dir "${1:-}")
tide=$build/tide
fmnist=$build/examples/fmnist/fmnist-train
worker=$build/tests/fault/elastic_worker
bench_require "$tide" "$fmnist" "$worker"
bench_require_cmd jq

cycles=${CYCLES:-5}
runs=${RUNS:-1}
big_count=${BIG_COUNT:-8388608}
trace=${TRACE:-$here/../shared/traces/aws-p3-capacity.csv}
speedup=${SPEEDUP:-140}
notice=${NOTICE:-$(awk -v s="$speedup" 'BEGIN { printf "%.3f", 120 / s }')}
trace_epochs=${TRACE_EPOCHS:-180}
export OPENBLAS_NUM_THREADS=1
out=$here/bench/results/elastic-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$out"
tables=$out/tables.txt
: >"$tables"
say() { echo "$@" | tee -a "$tables"; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# A chaos file: CYCLES cycles of PATTERN (a space-separated list of actions at
# GAP_S seconds apart, each "kill", "preempt" or "join"), the first at 3 s; it
# prints how many seconds the job must train for the whole schedule to run.
chaos_file() { # file pattern gap_s
  local f=$1 pattern=$2 gap=${3:-2} t=3 i a
  : >"$f"
  for ((i = 0; i < cycles; i++)); do
    for a in $pattern; do
      case $a in
      kill) echo "{\"t\": $t, \"action\": \"kill\", \"target\": \"random\"}" ;;
      preempt) echo "{\"t\": $t, \"action\": \"preempt\", \"notice_s\": 30, \"target\": \"random\"}" ;;
      join) echo "{\"t\": $t, \"action\": \"join\"}" ;;
      esac >>"$f"
      t=$((t + gap))
    done
  done
  echo $((t + 2)) # how long the job must train for the schedule to run out
}

# elastic_worker's log as JSON: one object per line, {"ev", "step", "gen", "t", ...}.
log_json() {
  jq -R -c 'split(" ") as $f
    | reduce ($f[1:][] | capture("(?<k>[^=]+)=(?<v>.*)")) as $kv ({ev: $f[0]};
        .[$kv.k] = (if $kv.k == "crc" or $kv.k == "rc" or $kv.k == "in" or $kv.k == "id"
                    then $kv.v else ($kv.v | tonumber) end))' "$1"
}

# Seconds per step of elastic_worker ARGS with 4 workers (a short undisturbed run).
calibrate() { # args...
  local log=$out/calibrate.log
  rm -f "$log"
  "$tide" run -n 4 --min 1 --max 4 --quiet -- "$worker" --log "$log" --steps 60 "$@" >/dev/null 2>&1
  log_json "$log" | jq -s '[.[] | select(.ev == "step" and .rank == 0 and .step >= 10)] | sort_by(.step)
    | (.[-1].t - .[0].t) / (.[-1].step - .[0].step)'
}

# One chaos run. name workload(fmnist|worker) chaos_pattern gap_s [worker args...]
chaos_run() {
  local name=$1 workload=$2 pattern=$3 gap=$4
  shift 4
  local r
  for ((r = 1; r <= runs; r++)); do
    local base=$out/$name-$r
    local need
    need=$(chaos_file "$base.chaos.jsonl" "$pattern" "$gap")
    local cmd
    if [ "$workload" = fmnist ]; then
      # An epoch takes 0.75 s (a fast machine of the class, quiet) to 4 s (a
      # slow one, loaded) with 4 workers on 2 cores; the run must outlast the
      # schedule on the fast one (with need/2 epochs it ran 9 of 20 events).
      cmd=("$fmnist" --epochs $((need + 4)) --quiet)
    else
      local spt steps
      spt=$(calibrate "$@")
      steps=$(awk -v n="$need" -v s="$spt" 'BEGIN { printf "%d", (n + 4) / s }')
      rm -f "$base.log"
      cmd=("$worker" --log "$base.log" --steps "$steps" "$@")
    fi
    local l0 l1
    l0=$(loadavg)
    "$tide" run -n 4 --min 1 --max 4 --chaos "$base.chaos.jsonl" --report "$base.report.json" \
      --events "$base.events.jsonl" -- "${cmd[@]}" >"$base.out" 2>&1 ||
      echo "bench/elastic.sh: $name run $r exited with $?; see $base.out" >&2
    l1=$(loadavg)
    echo "$l0 -> $l1" >"$base.load"
    if [ "$workload" = worker ]; then log_json "$base.log" >"$base.steps.jsonl"; fi
  done
}

# The report's events of KIND (recovery_ms, lost_steps) over all runs of NAME,
# and the coordinator's re-formation time of the generation each one led to.
events_of() { # name
  local f
  for f in "$out/$1"-*.report.json; do jq -c '.events[]' "$f"; done
}
gens_of() { # name
  local f
  for f in "$out/$1"-*.events.jsonl; do jq -c 'select(.event == "generation" and .generation > 0)' "$f"; done
}
# Pauses per generation change from the step logs: {"gen", "kind", "gap_ms", "pause_ms", "step_ms"}.
pauses_of() { # name
  local r base
  for ((r = 1; r <= runs; r++)); do
    base=$out/$1-$r
    jq -s -c --slurpfile ev "$base.events.jsonl" '
      [.[] | select(.ev == "step")] as $s
      | ($s | group_by(.gen) | map(group_by(.step) | map(min_by(.t)) | sort_by(.step))) as $g
      | ([$g[] | [range(1; length) as $i | .[$i].t - .[$i - 1].t] | .[]] | sort) as $iv
      | ($iv[($iv | length) / 2 | floor]) as $normal
      | ($ev | map(select(.event == "generation")) | map({key: (.generation | tostring), value: .kind})
         | from_entries) as $kind
      | [range(1; $g | length) as $i
         | {gen: $g[$i][0].gen, kind: ($kind[$g[$i][0].gen | tostring] // "?"),
            gap_ms: (($g[$i][0].t - $g[$i - 1][-1].t) * 1000),
            pause_ms: (($g[$i][0].t - $g[$i - 1][-1].t - $normal) * 1000),
            step_ms: ($normal * 1000)}]
      | .[]' "$base.steps.jsonl"
  done
}

# Joiners' admission from the step logs: from a joiner's init (registered, ready to
# train) to the first step completed by the generation it joined, in ms.
admissions_of() { # name
  local r
  for ((r = 1; r <= runs; r++)); do
    # The log does not say which process wrote a line, so a joiner's generation
    # is the first generation formed by a join whose first step follows its init.
    jq -s -r --slurpfile ev "$out/$1-$r.events.jsonl" '
      ($ev | map(select(.event == "generation" and (.kind | test("join")))) | map(.generation)) as $joins
      | ([.[] | select(.ev == "step")] | group_by(.gen) | map({gen: .[0].gen, t: (map(.t) | min)})
         | map(select(.gen as $g | $joins | index($g) != null))) as $firsts
      | [.[] | select(.ev == "init")] | sort_by(.t) | .[4:][]
      | .t as $t | ([$firsts[] | select(.t > $t)] | min_by(.t)) as $f
      | select($f != null) | ($f.t - $t) * 1000' "$out/$1-$r.steps.jsonl"
  done
}

# Median, min and max of the numbers on stdin (one per line), as "n median min max".
stats() {
  sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) { print "0 - - -"; exit }
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%d %.0f %.0f %.0f\n", NR, m, v[1], v[NR] }'
}
row() { # label numbers-on-stdin
  local s
  s=$(stats)
  printf '%-48s %3s %8s %8s %8s\n' "$1" $s | tee -a "$tables"
}
header() { printf '%-48s %3s %8s %8s %8s\n' "figure" "n" "median" "min" "max" | tee -a "$tables"; }
loads_of() { cat "$out/$1"-*.load | tr '\n' ';'; }

state_fmnist=$(awk 'BEGIN { n = 784*256 + 256 + 256*128 + 128 + 128*10 + 10; printf "%.2f", 2 * n * 4 / 1e6 }')

if [ "${SKIP_CHAOS:-0}" != 1 ]; then
echo "== fmnist-train, 4 workers: kill, join, preempt, join (x$cycles per run, $runs run(s))"
chaos_run fmnist fmnist "kill join preempt join" 2
echo "== elastic_worker, 1 MiB state, 4 workers: kill, join, preempt, join"
chaos_run worker-1m worker "kill join preempt join" 2 --count 131072 --step-ms 10
echo "== elastic_worker, $((big_count * 8 >> 20)) MiB state, 4 workers: kill, join, preempt, join"
chaos_run worker-big worker "kill join preempt join" 3 --count "$big_count" --step-ms 0

say ""
say "## Chaos runs ($(date -u '+%Y-%m-%d %H:%M UTC'))"
say "load average (1/5/15 min, before -> after each run): fmnist $(loads_of fmnist) worker-1m $(loads_of worker-1m) worker-big $(loads_of worker-big)"
say ""
say "### fmnist-train (state $state_fmnist MB: params + momentum), 4 workers"
header
events_of fmnist | jq -r 'select(.kind == "kill") | .recovery_ms // empty' | row "kill: recovery_ms (report)"
events_of fmnist | jq -r 'select(.kind == "kill") | .lost_steps // empty' | row "kill: lost_steps (report)"
gens_of fmnist | jq -r 'select(.kind == "loss") | .recovery_ms' | row "kill: reform_ms (coordinator)"
events_of fmnist | jq -r 'select(.kind == "preempt") | .recovery_ms // empty' | row "preempt: recovery_ms (report)"
gens_of fmnist | jq -r 'select(.kind == "leave") | .recovery_ms' | row "leave: reform_ms (coordinator)"
events_of fmnist | jq -r 'select(.kind == "join") | .recovery_ms // empty' | row "join: recovery_ms (report, incl. joiner start)"
gens_of fmnist | jq -r 'select(.kind == "join") | .recovery_ms' | row "join: reform_ms (coordinator)"

for name in worker-1m worker-big; do
  if [ "$name" = worker-1m ]; then bytes=$((131072 * 8)); else bytes=$((big_count * 8)); fi
  say ""
  say "### elastic_worker $name (state $bytes bytes of x), 4 workers"
  header
  pauses_of "$name" >"$out/$name.pauses.jsonl"
  jq -r '.step_ms' "$out/$name.pauses.jsonl" | row "normal step interval, ms (n: transitions)"
  for k in loss leave join; do
    jq -r "select(.kind == \"$k\") | .pause_ms" "$out/$name.pauses.jsonl" | row "$k: pause_ms (step log)"
    gens_of "$name" | jq -r "select(.kind == \"$k\") | .recovery_ms" | row "$k: reform_ms (coordinator)"
  done
  admissions_of "$name" | row "join: admission_ms (joiner ready -> first step)"
  events_of "$name" | jq -r 'select(.kind == "kill") | .recovery_ms // empty' | row "kill: recovery_ms (report)"
  events_of "$name" | jq -r 'select(.kind == "preempt") | .recovery_ms // empty' | row "preempt: recovery_ms (report)"
done
# The implied state-transfer rate: what the large state's join costs the group
# beyond what its leave costs (the same re-formation with no state to move), and
# beyond the 1 MiB join.
med() { jq -r "select(.kind == \"$2\") | .pause_ms" "$out/$1.pauses.jsonl" | stats | cut -d' ' -f2; }
rate() { # extra_bytes extra_ms
  awk -v b="$1" -v ms="$2" 'BEGIN { if (ms > 0) printf "%.2f GB/s", b / ms / 1e6; else print "n/a" }'
}
bj=$(med worker-big join) bl=$(med worker-big leave) sj=$(med worker-1m join)
if [ "$bj" != - ] && [ "$bl" != - ] && [ "$sj" != - ]; then
  say ""
  say "large-state join ($((big_count * 8)) bytes): median pause $bj ms; its leave $bl ms; 1 MiB join $sj ms"
  say "implied transfer rate: $(rate $((big_count * 8)) $((bj - bl))) (join - leave), $(rate $((big_count * 8 - 1048576)) $((bj - sj))) (join - 1 MiB join)"
  gmed() { gens_of "$1" | jq -r "select(.kind == \"$2\") | .recovery_ms" | stats | cut -d' ' -f2; }
  rj=$(gmed worker-big join) rl=$(gmed worker-big leave)
  say "re-formation (coordinator, state sync included): join $rj ms, leave $rl ms:" \
    "$(rate $((big_count * 8)) $((rj - rl))) for the state's broadcast"
fi
fi # SKIP_CHAOS

if [ "${SKIP_TRACE:-0}" != 1 ]; then
  # The job starts at the trace's first capacity, scaled as the replay does
  # (round(capacity x max / largest), within --min..--max).
  start=$(awk -F, -v max=4 '/^[0-9]/ { if (first == "") first = $1; if ($1 == first) c0 = $2; if ($2 > top) top = $2 }
    END { n = int(c0 * max / top + 0.5); if (n < 1) n = 1; if (n > max) n = max; print n }' "$trace")
  echo "== trace $(basename "$trace"), speedup $speedup, notice $notice s, start $start worker(s)"
  base=$out/trace
  l0=$(loadavg)
  "$tide" run -n "$start" --min 1 --max 4 --trace "$trace" --trace-speedup "$speedup" \
    --trace-notice "$notice" --report "$base.report.json" --events "$base.events.jsonl" -- \
    "$fmnist" --epochs "$trace_epochs" --quiet >"$base.out" 2>&1 ||
    echo "bench/elastic.sh: the trace run exited with $?; see $base.out" >&2
  echo "$l0 -> $(loadavg)" >"$base.load"
  say ""
  say "## Trace replay: $(basename "$trace"), --max 4 --min 1, speedup $speedup, notice $notice s, fmnist-train --epochs $trace_epochs"
  say "load average: $(cat "$base.load")"
  say "trace duration at this speedup: $(awk -F, -v s="$speedup" '/^[0-9]/ { if (f == "") f = $1; l = $1 } END { printf "%.0f s", (l - f) / 1000 / s }' "$trace")"
  jq -r '"wall_s \(.wall_s | . * 10 | round / 10)  steps \(.steps)  samples_per_s \(.samples_per_s | round)  step_time_s \(.step_time_s | . * 10 | round / 10)  goodput \(.goodput | . * 1000 | round / 1000)  exit_status \(.exit_status)",
    "world sizes: \([.world_size_timeline[].world_size] | map(tostring) | join(" "))",
    "events: \(.events | group_by(.kind) | map("\(.[0].kind) \(length)") | join(", ")); lost steps \([.events[].lost_steps // 0] | add // 0); unresolved \([.events[] | select(.recovery_ms == null)] | length)"' \
    "$base.report.json" | tee -a "$tables"
  header
  jq -r '.events[] | select(.kind == "preempt") | .recovery_ms // empty' "$base.report.json" | row "preempt: recovery_ms (report)"
  jq -r '.events[] | select(.kind == "join") | .recovery_ms // empty' "$base.report.json" | row "join: recovery_ms (report, incl. joiner start)"
  jq -r 'select(.event == "generation" and .generation > 0) | .recovery_ms' "$base.events.jsonl" | row "re-formation: reform_ms (coordinator)"
fi
echo "results in $out"
