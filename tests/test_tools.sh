#!/bin/sh
# test_tools.sh -- the user-facing programs end to end: flx-example under
# flxrun, flx-info, and flx-train learning the synthetic task on 1 and 3
# ranks (accuracy asserted), plus its error for a missing data directory.
set -u
top=${abs_top_builddir:-.}
fail() { echo "FAIL: $*"; exit 1; }

out=$("$top/flxrun" -n 3 "$top/flx-example" 2>&1) || fail "flx-example: $out"
[ "$(echo "$out" | grep -c 'sum = 6 (expected 6)')" -eq 3 ] || fail "flx-example output: $out"

"$top/flx-info" | grep -q "build features: tcp" || fail "flx-info has no feature line"
for knob in FLX_TIMEOUT FLX_ALGO FLX_JOB_SECRET FLX_ROOT FLX_CHUNK_SIZE FLX_LOG_LEVEL; do
    "$top/flx-info" -c | grep -q "^$knob=" || fail "flx-info -c does not list $knob"
done
FLX_TIMEOUT=never "$top/flx-info" -c >/dev/null 2>&1 && fail "flx-info accepted FLX_TIMEOUT=never"

for n in 1 3; do
    out=$("$top/flxrun" -n $n --timeout 300 "$top/flx-train" --synthetic --epochs 3 \
          --hidden 64 --batch 32 --seed 3 2>&1) || fail "flx-train on $n ranks: $out"
    echo "$out" | tail -2
    acc=$(echo "$out" | sed -n 's/.*test-acc \([0-9.]*\)%.*/\1/p' | tail -1)
    [ -n "$acc" ] || fail "no accuracy in: $out"
    awk -v a="$acc" 'BEGIN { exit !(a >= 85.0) }' || fail "synthetic test accuracy $acc% < 85% on $n ranks"
done

out=$("$top/flx-train" --data /nonexistent/dir --epochs 1 2>&1) && fail "missing data accepted"
echo "$out" | grep -q "/nonexistent/dir/train-images-idx3-ubyte" || fail "error does not name the file: $out"
echo "PASS: flx-example, flx-info, flx-train"
