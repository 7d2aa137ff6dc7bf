#!/bin/bash
# scripts/fuzz.sh [SECONDS] -- run the libFuzzer harnesses of tests/fuzz/
# (bootstrap and handshake messages, tcp wire header and receive path,
# configuration) for SECONDS each (default 60) from their seed corpora and
# print the executions of each.  Needs clang with libFuzzer (scripts/deps.sh
# installs it); installs nothing.  Configures build/ if it is not yet.
# Exit 0: no crash; 1: a crash (input in build/tests/fuzz/artifacts/) or
# no clang.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x configure ] || autoreconf -fi
mkdir -p build && cd build
[ -f Makefile ] || ../configure -q
make fuzz FUZZ_TIME="${1:-60}"
