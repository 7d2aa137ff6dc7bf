#!/bin/bash
# scripts/test.sh -- the project's test command: build from a clean tree,
# run the whole suite (make check), then the sanitizer build's suite
# (AddressSanitizer + UBSan) in build-asan/, then the multi-process suite
# over real verbs inside the SoftRoCE VM (../shared/softroce) when it is
# there and we are root; without it that part is skipped and says so.
# After the sanitizer suite the libFuzzer harnesses run 30 s each (FLX_FUZZ_TIME;
# skipped with a message when clang's libFuzzer is missing).
#
# The sanitizer suite runs every test, the multi-process ones on N = 1, 2,
# 3, 5 (even, odd, power of two and not) with a 300 kB large size
# (FLX_TEST_NRANKS, FLX_TEST_BIG_BYTES; the plain suite runs them all):
# the sanitizers look for memory errors on every code path, and the paths
# are the same at N = 4 or 8 and 4 MiB.  The ib suite is whole when the VM
# gets KVM; under software emulation (no usable /dev/kvm: 10-20 times
# slower) it is check_ib plus the collectives on N = 2, 3 (FLX_IB_SUITE=
# quick), so that the whole command stays within half an hour.
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
# detect_stack_use_after_return: a request left in a transport queue by an
# algorithm whose frame is gone would be reported (check_faults' aborted rd
# allreduce does, with the fail-at-once of collectives/prim.c undone)
FLX_TEST_NRANKS=${FLX_TEST_NRANKS:-1,2,3,5} FLX_TEST_BIG_BYTES=${FLX_TEST_BIG_BYTES:-300000} \
ASAN_OPTIONS=detect_leaks=1:detect_stack_use_after_return=1 make check -j1 || { cat tests/*.log test-suite.log 2>/dev/null | tail -200; exit 1; }
cd ..
# fuzzing, bounded: FLX_FUZZ_TIME seconds per harness (default 30; 0 skips)
fuzz_time=${FLX_FUZZ_TIME:-30}
if [ "$fuzz_time" = 0 ]; then
    echo "scripts/test.sh: SKIP fuzzing: FLX_FUZZ_TIME=0"
elif command -v clang >/dev/null && echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }' |
        clang -x c -fsanitize=fuzzer -o /tmp/flx-fuzz-probe.$$ - >/dev/null 2>&1; then
    rm -f /tmp/flx-fuzz-probe.$$
    make -C build fuzz FUZZ_TIME="$fuzz_time"
else
    echo "scripts/test.sh: SKIP fuzzing: no clang with libFuzzer (apt-get install -y clang libclang-rt-14-dev)"
fi
vm=../shared/softroce/softroce-run.sh
if [ -x "$vm" ] && [ "$(id -u)" = 0 ]; then
    if [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo; then
        quick=${FLX_IB_SUITE:-full} timeout=${SOFTROCE_TIMEOUT:-1200}
    else
        quick=${FLX_IB_SUITE:-quick} timeout=${SOFTROCE_TIMEOUT:-900}
    fi
    echo "scripts/test.sh: the suite over verbs (ib backend) in the SoftRoCE VM ($quick)"
    FLX_IB_SUITE=$quick SOFTROCE_TIMEOUT=$timeout "$vm" scripts/test-ib.sh build
    ib="ib suite, $quick"
else
    echo "scripts/test.sh: SKIP the ib suite: no $vm or not root"
    ib="ib suite skipped"
fi
echo "scripts/test.sh: all tests passed (plain and sanitizer builds; $ib)"
