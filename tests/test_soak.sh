#!/bin/sh
# test_soak.sh -- a short soak: 300 random collectives (every kind, dtype,
# op and algorithm, in place and not, up to 256 KiB) on 3 tcp ranks, every
# result checked exactly by flx-soak; then its argument errors.  The RSS
# limit is loose: ASan's quarantine (build-asan) holds freed memory; the
# leak check is scripts/soak.sh and scripts/valgrind.sh.
set -u
top=${abs_top_builddir:-.}
fail() { echo "FAIL: $*"; exit 1; }

out=$(FLX_NET=tcp "$top/flxrun" -n 3 --timeout 300 "$top/flx-soak" --iters 300 \
      --max-bytes 256k --seed 11 --report 100 --rss-limit 256 2>&1) || fail "flx-soak: $out"
echo "$out" | tail -2
echo "$out" | grep -q "summary: 300 collectives on 3 ranks.* 0 errors.*PASS" || fail "no PASS summary: $out"

"$top/flx-soak" --max-bytes lots >/dev/null 2>&1; [ $? -eq 2 ] || fail "bad --max-bytes not exit 2"
"$top/flx-soak" --iters 0 >/dev/null 2>&1; [ $? -eq 2 ] || fail "--iters 0 without --seconds not exit 2"
"$top/flx-soak" --help | grep -q -- "--max-bytes" || fail "no --help"
echo "PASS: flx-soak"
