#!/bin/sh
# test_soak.sh -- a short soak: 300 random collectives (every kind, dtype,
# op and algorithm, in place and not, up to 256 KiB) on 3 tcp ranks, and 400
# up to 4 KiB on 64, every result checked exactly by flx-soak; then its
# argument errors.  The RSS
# limit is loose: ASan's quarantine (build-asan) holds freed memory; the
# leak check is scripts/soak.sh and scripts/valgrind.sh.
set -u
top=${abs_top_builddir:-.}
fail() { echo "FAIL: $*"; exit 1; }

out=$(FLX_NET=tcp "$top/flxrun" -n 3 --timeout 300 "$top/flx-soak" --iters 300 \
      --max-bytes 256k --seed 11 --report 100 --rss-limit 256 2>&1) || fail "flx-soak: $out"
echo "$out" | tail -2
echo "$out" | grep -q "summary: 300 collectives on 3 ranks.* 0 errors.*PASS" || fail "no PASS summary: $out"

# 64 ranks: the inputs keep every partial sum exact past 30 ranks too (avg's partial sums
# outgrew bf16's exact integers from 33 ranks on: 128 wrong results here before)
out=$(FLX_NET=tcp "$top/flxrun" -n 64 --timeout 300 "$top/flx-soak" --iters 400 --max-bytes 4k \
      --seed 11 --report 400 --rss-limit 256 2>&1) || fail "flx-soak on 64 ranks: $(echo "$out" | tail -5)"
echo "$out" | grep -q "summary: 400 collectives on 64 ranks.* 0 errors.*PASS" ||
    fail "no PASS summary on 64 ranks: $(echo "$out" | tail -5)"
echo "$out" | grep summary

"$top/flx-soak" --max-bytes lots >/dev/null 2>&1; [ $? -eq 2 ] || fail "bad --max-bytes not exit 2"
"$top/flx-soak" --iters 0 >/dev/null 2>&1; [ $? -eq 2 ] || fail "--iters 0 without --seconds not exit 2"
"$top/flx-soak" --help | grep -q -- "--max-bytes" || fail "no --help"
# no warm-up: growth counts from the start; a run that ends inside the warm-up says that it
# did not check the growth (it printed growth 0.0 against the final RSS before)
out=$(FLX_NET=tcp "$top/flxrun" -n 2 --timeout 120 "$top/flx-soak" --iters 40 --max-bytes 64k \
      --seed 5 --warmup 0 --rss-limit 256 2>&1) || fail "flx-soak --warmup 0: $out"
echo "$out" | grep -q "summary: 40 collectives .* after 0 warm-up .*PASS" || fail "--warmup 0: $out"
out=$(FLX_NET=tcp "$top/flxrun" -n 2 --timeout 120 "$top/flx-soak" --iters 40 --max-bytes 64k \
      --seed 5 --warmup 100 2>&1) || fail "flx-soak shorter than its warm-up: $out"
echo "$out" | grep -q "growth not checked (the run ended inside the 100-collective warm-up): PASS" ||
    fail "a run inside its warm-up does not say the growth went unchecked: $out"
# an unwritable --csv stops every rank with exit 2, before any collective; bad values in one line
out=$(FLX_NET=tcp "$top/flxrun" -n 2 --timeout 60 "$top/flx-soak" --iters 10 \
      --csv /nonexistent-dir/s.csv 2>&1); rc=$?
[ "$rc" -eq 2 ] && [ "$(echo "$out" | grep -c "cannot write /nonexistent-dir/s.csv")" -eq 1 ] &&
    ! echo "$out" | grep -q "bookkeeping failed" || fail "flx-soak with an unwritable --csv: exit $rc: $out"
for bad in "--seed -1" "--rss-limit inf" "--bogus" "--seed"; do
    out=$("$top/flx-soak" $bad 2>&1); rc=$?
    [ "$rc" -eq 2 ] && [ "$(echo "$out" | wc -l)" -eq 1 ] || fail "flx-soak $bad: exit $rc: $out"
done
"$top/flx-soak" --iters 5 >/dev/full 2>/dev/null && fail "flx-soak writing to a full disk passed"
echo "PASS: flx-soak"
