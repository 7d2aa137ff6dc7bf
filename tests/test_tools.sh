#!/bin/sh
# test_tools.sh -- the user-facing programs end to end: flx-example under
# flxrun, flx-info, and flx-train's error for a missing data directory
# (test_train.sh trains).
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

out=$("$top/flx-train" --data /nonexistent/dir --epochs 1 2>&1) && fail "missing data accepted"
echo "$out" | grep -q "/nonexistent/dir/train-images-idx3-ubyte" || fail "error does not name the file: $out"
echo "PASS: flx-example, flx-info, flx-train"
