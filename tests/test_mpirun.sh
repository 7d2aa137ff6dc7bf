#!/bin/sh
# test_mpirun.sh -- Open MPI's mpirun launches a flexcoll program correctly:
# ranks and size come from OMPI_COMM_WORLD_*, the rendezvous from FLX_ROOT,
# and every rank's result is checked (#wrong must be 0 on every line).
set -u
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: mpirun not installed"; exit 77; }
top=${abs_top_builddir:-.}
# below the kernel's ephemeral ports (32768 up): mpirun's own loopback connections take
# those, and one took the root's port in a CI run ("cannot bind ...: Address already in use")
port=$(( 20000 + $$ % 12000 ))
out=$(timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
      -x FLX_ROOT=127.0.0.1:$port -x FLX_JOB_SECRET=mpirun-test-secret \
      "$top/flx-allreduce-perf" -b 8 -e 256k -f 8 -n 5 -w 1 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || { echo "FAIL: mpirun exited $rc"; exit 1; }
echo "$out" | grep -q "nRanks 2" || { echo "FAIL: the perf tool did not see 2 ranks"; exit 1; }
echo "$out" | grep -q "Out of bounds values : 0 OK" || { echo "FAIL: wrong results"; exit 1; }
rows=$(echo "$out" | grep -cE '^ +[0-9]+ +[0-9]+ +float')
[ "$rows" -ge 5 ] || { echo "FAIL: expected 5 result rows, got $rows"; exit 1; }
echo "PASS: mpirun -np 2 launched flexcoll ($rows sizes, 0 wrong)"
