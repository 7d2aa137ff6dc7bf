#!/bin/bash
# scripts/main.sh -- build flexcoll in build/ and run the main job: a short
# real data-parallel training run on Fashion-MNIST with 4 local ranks over
# the tcp backend (flxrun starts the ranks), gradients synced by the flex
# controller; the trained model goes to build/fmnist.model (evaluate it
# again with ./flx-train --epochs 0 --load fmnist.model in build/).  Extra
# arguments go to flx-train; FLX_RANKS sets the number of ranks (default 4).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x configure ] || autoreconf -fi
mkdir -p build && cd build
[ -f Makefile ] || ../configure -q
make -j"$(nproc)"
./flx-info | head -3
exec ./flxrun -n "${FLX_RANKS:-4}" --timeout 900 -- ./flx-train --epochs 2 --policy flex \
    --save fmnist.model "$@"
