#!/bin/sh
# tests/fuzz/run.sh SRCDIR BUILDDIR -- build the libFuzzer harnesses of
# tests/fuzz/ with clang from the production sources and run each for
# FUZZ_TIME seconds (default 60) from its seed corpus; print the executions
# of each and fail on the first crash, leak or sanitizer report (the input
# is left in BUILDDIR/tests/fuzz/artifacts/).  Called by `make fuzz`.
# Environment: FUZZ_CC (clang), FUZZ_TIME, FUZZ_TARGETS, SODIUM_CFLAGS,
# SODIUM_LIBS.
set -u
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
cc=${FUZZ_CC:-clang}
time_s=${FUZZ_TIME:-60}
targets=${FUZZ_TARGETS:-fuzz_boot fuzz_tcp_hdr fuzz_config}
flags="-g -O1 -Wall -Wextra -Wno-unused-parameter -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
core="common/status.c common/log.c common/config.c common/time.c transport/sock.c
      transport/auth.c transport/boot.c transport/boot_msg.c transport/tcp/tcp.c transport/tcp/hdr.c
      transport/tcp/lane.c transport/tl.c common/dtype.c"
out=$build/tests/fuzz

if ! command -v "$cc" >/dev/null 2>&1; then
    echo "make fuzz: $cc not found; libFuzzer needs clang: apt-get install -y clang libclang-rt-14-dev" >&2
    exit 1
fi
mkdir -p "$out/artifacts"
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' \
    >"$out/probe.c"
if ! "$cc" $flags "$out/probe.c" -o "$out/probe" >"$out/probe.log" 2>&1; then
    cat "$out/probe.log" >&2
    echo "make fuzz: $cc cannot link -fsanitize=fuzzer (libFuzzer); apt-get install -y libclang-rt-14-dev" >&2
    exit 1
fi

srcs=""
for f in $core; do srcs="$srcs $src/$f"; done
status=0
summary=""
for t in $targets; do
    echo "make fuzz: building $t with $cc"
    # shellcheck disable=SC2086
    if ! "$cc" $flags -include "$build/config.h" -I"$src/include" -I"$src" -I"$build" \
            ${SODIUM_CFLAGS:-} -o "$out/$t" "$src/tests/fuzz/$t.c" $srcs ${SODIUM_LIBS:--lsodium} \
            -lm -pthread; then
        echo "make fuzz: FAIL: $t does not build" >&2
        exit 1
    fi
    mkdir -p "$out/work/$t"
    echo "make fuzz: running $t for ${time_s}s"
    # new inputs go to work/ (first corpus dir); the committed seeds stay as they are
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
        "$out/$t" -max_total_time="$time_s" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
        -close_fd_mask=2 -print_final_stats=1 -artifact_prefix="$out/artifacts/$t-" \
        "$out/work/$t" "$src/tests/fuzz/corpus/$t" >"$out/$t.log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/$t.log" | tail -1)
    [ -n "$runs" ] || runs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$out/$t.log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$out/$t.log" | tail -1)
    if [ $rc -ne 0 ]; then
        tail -60 "$out/$t.log" >&2
        echo "make fuzz: FAIL: $t found a crash after ${runs:-?} executions; input in $out/artifacts/" >&2
        status=1
        line="$t: ${runs:-?} executions, CRASH (see $out/$t.log)"
    else
        line="$t: ${runs:-?} executions in ${time_s}s, ${cov:-cov: ?}, no crash"
    fi
    echo "make fuzz: $line"
    summary="$summary
  $line"
done
echo "make fuzz: summary:$summary"
exit $status
