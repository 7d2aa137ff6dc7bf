#!/bin/bash
# scripts/soak.sh [--ib] [-n RANKS] [BUILD_DIR] [-- FLX-SOAK OPTIONS...]
# Soak test: flx-soak runs thousands of random collectives (kind, size,
# dtype, op, algorithm, in place or not) on local ranks under flxrun, checks
# every result exactly and watches RSS; exit status is flx-soak's.
#   scripts/soak.sh                         # tcp, 4 ranks, 20000 collectives or 5 min
#   scripts/soak.sh -n 3 build -- --iters 300 --max-bytes 256k
#   scripts/soak.sh --ib build              # ib backend inside the SoftRoCE VM (root),
#                                           # 2 ranks, 300 collectives up to 256 KiB
set -uo pipefail
ib=0
ranks=
build=
die() { echo "soak.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --ib) ib=1; shift ;;
        -n) [ $# -ge 2 ] || die "-n needs a number of ranks"
            [[ $2 =~ ^[0-9]+$ ]] && [ "$2" -ge 1 ] || die "-n: not a number of ranks: '$2'"
            ranks=$2; shift 2 ;;
        --) shift; break ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        -*) die "unknown option '$1' (-h for help)" ;;
        *) [ -z "$build" ] || die "one BUILD_DIR, not '$build' and '$1'"
           build=$1; shift ;;
    esac
done
here=$(cd "$(dirname "$0")/.." && pwd)
build=${build:-${FLX_BUILD:-$here/build}}
[ -d "$build" ] || die "no build directory '$build'"
build=$(cd "$build" && pwd) || exit 2
[ -x "$build/flx-soak" ] || { echo "soak.sh: no $build/flx-soak: build first (make -C $build)" >&2; exit 2; }
if [ $ib = 0 ]; then
    [ $# -gt 0 ] || set -- --iters 20000 --seconds 300 --max-bytes 4M --report 1000
    export FLX_NET=tcp
    exec "$build/flxrun" -n "${ranks:-4}" --timeout 3600 -- "$build/flx-soak" "$@"
fi
vm=$here/../shared/softroce/softroce-run.sh
[ -x "$vm" ] || { echo "soak.sh: SKIP --ib: no $vm" >&2; exit 77; }
[ "$(id -u)" = 0 ] || { echo "soak.sh: SKIP --ib: the SoftRoCE VM needs root" >&2; exit 77; }
[ $# -gt 0 ] || set -- --iters 300 --max-bytes 256k --report 100
# SoftRoCE under emulation is slow: long timeouts, 64 KiB chunks
args=$(printf ' %q' "$@")
SOFTROCE_TIMEOUT=${SOFTROCE_TIMEOUT:-900} "$vm" bash -c "ulimit -l unlimited; \
    FLX_NET=ib FLX_CALIBRATE=no FLX_TIMEOUT=120s FLX_CONNECT_TIMEOUT=120s FLX_CHUNK_SIZE=64k \
    '$build/flxrun' -n ${ranks:-2} --timeout 800 -- '$build/flx-soak'$args"
