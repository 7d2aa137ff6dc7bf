#!/bin/bash
# scripts/valgrind-ib.sh [BUILD_DIR] -- 2 ranks of flx-example over the ib
# backend under valgrind memcheck: no definite leak and no invalid access
# (exit 0).  Undefined-value checks are off: valgrind cannot see the device
# (or the SoftRoCE kernel driver) writing received data into memory.
#   ../shared/softroce/softroce-run.sh scripts/valgrind-ib.sh build
set -uo pipefail
build=$(cd "${1:-${FLX_BUILD:-.}}" && pwd)
export LD_LIBRARY_PATH=$build/.libs FLX_NET=ib FLX_CALIBRATE=no FLX_TIMEOUT=120s \
       FLX_CONNECT_TIMEOUT=120s
timeout 600 "$build/flxrun" -n 2 -- valgrind -q --undef-value-errors=no --leak-check=full \
    --show-leak-kinds=definite --errors-for-leak-kinds=definite --error-exitcode=9 \
    "$build/.libs/flx-example"
