#!/usr/bin/env bash
# test_elastic.sh TRAINER TIDE
#
# The trainer through an elastic job (docs/elastic.md): 4 ranks, one killed at
# 1.0 s (P3), one given notice at 1.6 s (P2), a joiner at 2.2 s (P4). The run must
# end with exit 0 and a final line whose train loss and accuracy pass the short-run
# bars; the trainer itself checks that every rank ends with the same parameters,
# which a broken state restore would fail. Skips (exit 77) without the dataset.
set -u
trainer=$1 tide=$2
data=${FMNIST_DATA:-/usr/share/datasets/fashion-mnist}
[ -r "$data/train-images-idx3-ubyte.gz" ] || { echo "no dataset in $data: skipped"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/chaos.jsonl" <<'EOC'
{"t": 1.0, "action": "kill", "target": 2}
{"t": 1.6, "action": "preempt", "notice_s": 10, "target": 1}
{"t": 2.2, "action": "join"}
EOC
out=$("$tide" run -n 4 --min 2 --max 4 --chaos "$dir/chaos.jsonl" --report "$dir/report.json" -- \
      "$trainer" --data-dir "$data" --max-steps 2500 --json) || { echo "FAIL: exit $?"; echo "$out"; exit 1; }
echo "$out"
line=$(grep '"final":true' <<<"$out") || { echo "FAIL: no final line"; exit 1; }
field() { sed -E "s/.*\"$1\":\"?([^,\"}]*).*/\1/" <<<"$line"; }
loss=$(field train_loss) acc=$(field test_accuracy) steps=$(field step)
events=$(grep -o '"kind": *"[a-z-]*"' "$dir/report.json" | tr -d ' "' | sed 's/kind://' | tr '\n' ' ')
echo "report events: $events"
awk -v l="$loss" -v a="$acc" -v s="$steps" -v e="$events" 'BEGIN {
  if (s != 2500) { print "FAIL: ran " s " steps, want 2500"; exit 1 }
  if (!(l < 0.5)) { print "FAIL: train_loss " l " not below 0.5"; exit 1 }
  if (!(a >= 0.8)) { print "FAIL: test_accuracy " a " below 0.8"; exit 1 }
  if (e !~ /kill/ || e !~ /preempt/ || e !~ /join/) { print "FAIL: the chaos did not happen: " e; exit 1 }
  print "ok: train_loss " l ", test_accuracy " a " through " e
}'
