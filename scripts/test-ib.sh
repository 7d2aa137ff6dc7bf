#!/bin/bash
# scripts/test-ib.sh [BUILD_DIR] -- the multi-process suite on real verbs.
# Needs an active RDMA port; on a machine without one, run it inside the
# SoftRoCE VM:  ../shared/softroce/softroce-run.sh scripts/test-ib.sh build
# (SoftRoCE under emulation is slow: the large size is cut to 300 kB, still
# far above the eager limit, with 64 KiB chunks so pipelines have depth.)
# Any "leaked verbs objects" line (a CQ, channel or PD the verbs refused to
# free at teardown) fails it too.
# FLX_IB_SUITE=quick (scripts/test.sh sets it when the VM runs without KVM,
# 10-20 times slower): check_ib, and check_coll on N = 2, 3 only.
set -uo pipefail
build=${1:-${FLX_BUILD:-.}}
cd "$build" || exit 2
export FLX_NET=ib FLX_TEST_BIG_BYTES=${FLX_TEST_BIG_BYTES:-300000}
rc=0
if ! ./flx-info | grep -q "locked memory"; then
    echo "test-ib.sh: flx-info shows no locked-memory line under the RDMA devices"
    rc=1
fi
tests="check_ib check_coll check_errors check_faults"
if [ "${FLX_IB_SUITE:-full}" = quick ]; then
    tests="check_ib check_coll"
    export FLX_TEST_NRANKS=${FLX_TEST_NRANKS:-2,3}
fi
for t in $tests; do
    start=$SECONDS
    if [ "$t" = check_coll ]; then
        FLX_CHUNK_SIZE=64k ./tests/$t > "/tmp/ib-$t.log" 2>&1; r=$?
    else
        ./tests/$t > "/tmp/ib-$t.log" 2>&1; r=$?
    fi
    grep -E "^# kill trials" "/tmp/ib-$t.log"
    grep -E "^[0-9]+%: Checks" "/tmp/ib-$t.log" | sed "s/^/$t (ib, $((SECONDS - start)) s): /"
    if grep -q "leaked verbs objects" "/tmp/ib-$t.log"; then
        grep "leaked verbs objects" "/tmp/ib-$t.log" | head -5
        rc=1
    fi
    if [ $r -ne 0 ] && [ $r -ne 77 ]; then
        grep -E "^rank [0-9]+:|^trial [0-9]+|:F:|:E:" "/tmp/ib-$t.log" | head -20
        rc=1
    fi
done
exit $rc
