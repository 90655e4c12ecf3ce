#!/usr/bin/env bash
# test_bad_data.sh TRAINER MKBAD WORKDIR
#
# Runs the trainer on each dataset fmnist-mkbad writes. The well-formed one must
# train (exit 0); every broken one must be refused with exit status 1 and a message
# naming the broken file: not a usage error (2), not a signal or a sanitizer report,
# not a silent success.
set -u
trainer=$1 mkbad=$2 work=$3
rm -rf "$work" && "$mkbad" "$work" || { echo "FAIL: fmnist-mkbad"; exit 1; }
failed=0 cases=0
for dir in "$work"/*/; do
  name=$(basename "$dir")
  cases=$((cases + 1))
  err=$("$trainer" --data-dir "$dir" --max-steps 2 --batch 16 --quiet 2>&1 >/dev/null)
  rc=$?
  if [ "$name" = ok ]; then
    if [ $rc -ne 0 ]; then echo "FAIL ok: exit $rc: $err"; failed=1; fi
    continue
  fi
  expect=$(cat "$dir/EXPECT")
  if [ $rc -ne 1 ]; then
    echo "FAIL $name: exit $rc (want 1): $err"; failed=1
  elif ! grep -qF -- "$expect" <<<"$err"; then
    echo "FAIL $name: message does not name $expect: $err"; failed=1
  elif grep -qE 'AddressSanitizer|runtime error|LeakSanitizer' <<<"$err"; then
    echo "FAIL $name: sanitizer report: $err"; failed=1
  else
    echo "ok   $name: $err"
  fi
done
[ $cases -ge 10 ] || { echo "FAIL: only $cases cases"; exit 1; }
exit $failed
