#!/bin/bash
# scripts/deps.sh -- install everything flexcoll builds, tests and trains with
# (Debian 12 packages only; clang + libclang-rt-14-dev for libFuzzer
# (make fuzz), valgrind for scripts/valgrind.sh).  Run as root or with sudo available.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends \
    build-essential autoconf automake libtool pkg-config check libsodium-dev zlib1g-dev \
    rdma-core libibverbs-dev librdmacm-dev ibverbs-utils perftest libhwloc-dev \
    libopenblas-dev openmpi-bin libopenmpi-dev libgloo-dev dataset-fashion-mnist iproute2 gnuplot-nox \
    ca-certificates procps help2man clang libclang-rt-14-dev llvm valgrind
