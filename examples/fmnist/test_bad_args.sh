#!/usr/bin/env bash
# test_bad_args.sh TRAINER
#
# Every malformed command line is refused before any work with exit status 2 and a
# message naming the offending argument; --help succeeds.
set -u
trainer=$1 failed=0
check() { # EXPECTED-SUBSTRING ARGS...
  local want=$1; shift
  err=$("$trainer" "$@" 2>&1 >/dev/null); rc=$?
  if [ $rc -ne 2 ] || ! grep -qF -- "$want" <<<"$err"; then
    echo "FAIL [$*]: exit $rc (want 2), message: $err"; failed=1
  else
    echo "ok   [$*]: $(head -1 <<<"$err")"
  fi
}
check "--batch" --batch 0
check "--batch" --batch=99999999999999999999
check "--batch" --batch 12x
check "--lr" --lr abc
check "--lr" --lr nan
check "--lr" --lr=-1
check "--epochs needs a value" --epochs
check "--max-steps" --max-steps 0
check "--seed" --seed -1
check "--hidden" --hidden 256,x
check "--schedule" --schedule warmup
check "--save-params needs a file name" --save-params ""
check "--save-params needs a value" --save-params
check "is a directory" --save-params /
check "no directory '/nonexistent-fmnist'" --save-params /nonexistent-fmnist/params.bin
check "unknown option '--bogus'" --bogus
check "takes no value" --json=1
check "unexpected argument 'extra'" extra
"$trainer" --help | grep -q -- "--max-steps" || { echo "FAIL: --help"; failed=1; }
exit $failed
