#!/bin/bash
# scripts/ib-compare.sh -- flexcoll's ib backend against the verbs baseline
# and against its own tcp backend, in ONE SoftRoCE VM run:
#
#   ../shared/softroce/softroce-run.sh scripts/ib-compare.sh [BUILD_DIR]
#   (or directly on a host with an active RDMA port)
#
# Prints ib_write_lat (8 B) and ib_write_bw -b (1 MiB, per direction = half
# the bidirectional figure), flx-allreduce-perf with 2 ranks over ib and over
# tcp, and the ratios the project tracks:
#   busbw(ib) / per-direction ib_write_bw   at >= 1 MiB   (target >= 0.8)
#   8 B allreduce median latency (1000 calls) / ib_write_lat typical (target <= 3)
#   time(tcp) / time(ib) at every size                      (> 1: ib faster)
set -euo pipefail
build=${1:-${FLX_BUILD:-.}}
dev=${FLX_IB_HCA:-rxe0}
iters=${IB_ITERS:-10}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
command -v ib_write_bw >/dev/null || { echo "ib-compare: perftest is not installed" >&2; exit 2; }

ib_write_lat -d "$dev" -s 8 -n 1000 >/dev/null 2>&1 & sleep 1
lat=$(ib_write_lat -d "$dev" -s 8 -n 1000 127.0.0.1 2>/dev/null | awk '$1 == 8 {print $5}')
wait
ib_write_bw -d "$dev" -b -s 1048576 -n 300 >/dev/null 2>&1 & sleep 1
bw=$(ib_write_bw -d "$dev" -b -s 1048576 -n 300 127.0.0.1 2>/dev/null | awk '$1 == 1048576 {print $4}')
wait
# MB/s bidirectional -> GB/s per direction
bw_dir=$(awk -v b="$bw" 'BEGIN { printf "%.5f", b * 1.048576 / 1000 / 2 }')
echo "# ib_write_lat 8 B typical: ${lat} us; ib_write_bw -b 1 MiB: ${bw} MB/s bidirectional = ${bw_dir} GB/s per direction"

for net in ib tcp; do
    FLX_NET=$net timeout 900 "$build/flxrun" -n 2 "$build/flx-allreduce-perf" -b 8 -e 4M -f 4 \
        -n "$iters" -w 2 -c 1 > "$out/$net.txt" 2>&1 || { cat "$out/$net.txt"; exit 1; }
    grep -q "Out of bounds values : 0 OK" "$out/$net.txt" || { cat "$out/$net.txt"; exit 1; }
done
# the latency ratio from its own run: the p50 of 1000 calls, not of the sweep's few
FLX_NET=ib timeout 900 "$build/flxrun" -n 2 "$build/flx-allreduce-perf" -b 8 -e 8 -n 1000 -w 50 \
    -c 0 > "$out/lat.txt" 2>&1 || { cat "$out/lat.txt"; exit 1; }
l8=$(awk '/^\[0\] +8 / {print $16}' "$out/lat.txt")
echo "#       size    ib time (us)   tcp time (us)   tcp/ib   ib busbw (GB/s)   busbw / ib_write_bw"
join <(awk '/^\[0\] +[0-9]/ {print $2, $7, $16}' "$out/ib.txt") \
     <(awk '/^\[0\] +[0-9]/ {print $2, $7}' "$out/tcp.txt") |
awk -v bw="$bw_dir" -v lat="$lat" -v l8="$l8" '
    # busbw of a 2-rank allreduce = algbw = size / time
    { busbw = $1 / $2 / 1000
      printf "%12d %15.1f %15.1f %8.2f %17.5f %21s\n", $1, $2, $4, $4 / $2, busbw,
             ($1 >= 1048576 ? sprintf("%.2f", busbw / bw) : "-") }
    END { printf "# 8 B allreduce median (p50 of 1000 calls, %.1f us) / ib_write_lat typical = %.2f (target <= 3)\n", l8, l8 / lat }'
