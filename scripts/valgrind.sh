#!/bin/bash
# scripts/valgrind.sh [BUILD_DIR] [RANKS] -- flx-soak (FLX_VG_ITERS random
# collectives, default 300, up to 2 MiB: every kind, dtype, op, algorithm)
# and flx-example on RANKS (default 4) local tcp ranks, every rank under
# valgrind memcheck: exit 0 when no rank has a definite leak or an invalid
# access (read, write, free, use of an uninitialised value).  The ib
# backend's counterpart runs in the SoftRoCE VM: scripts/valgrind-ib.sh.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-${FLX_BUILD:-$here/build}}" && pwd) || exit 2
n=${2:-4}
command -v valgrind >/dev/null || { echo "valgrind.sh: valgrind not found: apt-get install -y valgrind" >&2; exit 2; }
log=$(mktemp -d /tmp/flx-valgrind.XXXXXX)
# the libtool wrappers are scripts: run the real binaries with the library path
export LD_LIBRARY_PATH=$build/.libs FLX_NET=tcp FLX_CALIBRATE=no FLX_TIMEOUT=300s \
       FLX_CONNECT_TIMEOUT=300s
vg=(valgrind --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite
    --track-origins=yes --error-exitcode=9 --log-file="$log/%q{FLX_RANK}-%p.log")
bin() { if [ -x "$build/.libs/$1" ]; then echo "$build/.libs/$1"; else echo "$build/$1"; fi; }
rc=0
echo "valgrind.sh: flx-soak on $n tcp ranks under memcheck (logs in $log)"
timeout 1200 "$build/flxrun" -n "$n" --timeout 1100 -- "${vg[@]}" "$(bin flx-soak)" \
    --iters "${FLX_VG_ITERS:-300}" --max-bytes 2M --seed 7 --report 100 --rss-limit 1000 || rc=1
echo "valgrind.sh: flx-example on $n tcp ranks under memcheck"
timeout 600 "$build/flxrun" -n "$n" --timeout 500 -- "${vg[@]}" "$(bin flx-example)" || rc=1
for f in "$log"/*.log; do
    errs=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) errors.*/\1/p' "$f" | tail -1)
    def=$(sed -n 's/.*definitely lost: \([0-9,]*\) bytes.*/\1/p' "$f" | tail -1)
    what=$(sed -n 's/^==[0-9]*== Command: //p' "$f" | head -1)
    grep -q "All heap blocks were freed" "$f" && def="0 (all heap blocks freed)"
    echo "valgrind.sh: rank $(basename "$f" .log | cut -d- -f1) $(basename "${what%% *}"):" \
         "ERROR SUMMARY ${errs:-?} errors, definitely lost: ${def:-0}"
    if [ "${errs:-1}" != 0 ] || [ "${def%% *}" != 0 ]; then
        rc=1
        grep -E "Invalid|uninitialised|definitely lost|at 0x|by 0x" "$f" | head -40
    fi
done
[ $rc = 0 ] && echo "valgrind.sh: PASS: no definite leak, no invalid access on any rank" \
            || echo "valgrind.sh: FAIL (see $log)"
exit $rc
