#!/bin/bash
# scripts/test.sh -- the project's test command: build from a clean tree,
# run the whole suite (make check), then the sanitizer build's suite
# (AddressSanitizer + UBSan) in build-asan/.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
[ -x configure ] || autoreconf -fi
mkdir -p build && cd build
[ -f Makefile ] || ../configure -q
make -j"$jobs"
make check -j1 || { cat tests/*.log test-suite.log 2>/dev/null | tail -200; exit 1; }
cd ..
mkdir -p build-asan && cd build-asan
[ -f Makefile ] || ../configure -q --enable-asan
make -j"$jobs"
ASAN_OPTIONS=detect_leaks=1 make check -j1 || { cat tests/*.log test-suite.log 2>/dev/null | tail -200; exit 1; }
echo "scripts/test.sh: all tests passed (plain and sanitizer builds)"
