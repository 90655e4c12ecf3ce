#!/usr/bin/env bash
# test_short_run.sh TRAINER [LAUNCHER...]
#
# A short run on the real dataset: 200 steps of 128 (under half an epoch), in one
# process, or through the launcher given after TRAINER (`tide run -n 4 --`).
# The loss at initialization is ln 10 = 2.30 and chance accuracy is 10%; this model
# reaches a mean train loss of 0.58-0.62 and 82-84% test accuracy within these 200
# steps over seeds 1-3 (docs/example-fmnist.md), so the bars below (train loss < 0.8,
# test accuracy >= 78%) fail on any broken forward, backward, update, sampler or
# data path while leaving room for float summation order across world sizes.
# Skips (exit 77) when the dataset is not installed.
set -u
trainer=$1; shift
data=${FMNIST_DATA:-/usr/share/datasets/fashion-mnist}
[ -r "$data/train-images-idx3-ubyte.gz" ] || { echo "no dataset in $data: skipped"; exit 77; }
out=$("$@" "$trainer" --data-dir "$data" --max-steps 200 --json) || { echo "FAIL: exit $?"; echo "$out"; exit 1; }
echo "$out"
line=$(grep '"final":true' <<<"$out") || { echo "FAIL: no final line"; exit 1; }
field() { sed -E "s/.*\"$1\":\"?([^,\"}]*).*/\1/" <<<"$line"; }
loss=$(field train_loss) acc=$(field test_accuracy) steps=$(field step)
awk -v l="$loss" -v a="$acc" -v s="$steps" 'BEGIN {
  if (s != 200) { print "FAIL: ran " s " steps, want 200"; exit 1 }
  if (!(l < 0.8)) { print "FAIL: train_loss " l " not below 0.8"; exit 1 }
  if (!(a >= 0.78)) { print "FAIL: test_accuracy " a " below 0.78"; exit 1 }
  print "ok: train_loss " l ", test_accuracy " a
}'
