#!/bin/sh
# test_install.sh -- flexcoll as a user who installs it meets it: make
# install into a staging directory (DESTDIR), the README's example built
# with the installed flexcoll.pc and run with the installed flxrun, the
# header alone compiled strictly as C and C++, only flx_* names exported,
# the version the same everywhere, the static archive (--enable-static)
# linked with pkg-config --static beside a program defining names the
# library uses inside, and make uninstall leaving no file behind.
set -u
top=${abs_top_builddir:-.}
src=${abs_top_srcdir:-..}
fail() { echo "FAIL: $*"; exit 1; }

tmp=$(mktemp -d) || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT
dest=$tmp/dest
make -s -C "$top" install DESTDIR="$dest" >"$tmp/install.log" 2>&1 ||
    fail "make install DESTDIR=$dest: $(tail -20 "$tmp/install.log")"
libdir=$(sed -n 's/^libdir=//p' "$top/flexcoll.pc")
prefix=$(sed -n 's/^prefix=//p' "$top/flexcoll.pc")
case $libdir in *'${'*) libdir=$(echo "$libdir" | sed "s|\${exec_prefix}|$prefix|; s|\${prefix}|$prefix|") ;; esac
bindir=$prefix/bin
[ -f "$dest$libdir/pkgconfig/flexcoll.pc" ] || fail "no flexcoll.pc in $dest$libdir/pkgconfig"
[ -f "$dest$prefix/include/flexcoll.h" ] || fail "no flexcoll.h under $dest$prefix/include"
for t in flxrun flx-info flx-train flx-allreduce-perf; do
    [ -x "$dest$bindir/$t" ] || fail "$t not installed in $dest$bindir"
done
# the man pages (help2man: each tool's --help; flx-info's lists every FLX_* variable), where
# configure found help2man
if [ -n "$(sed -n 's/^HELP2MAN = //p' "$top/Makefile")" ]; then
    tools=$(sed -n 's/^\([^:]*\):.*/\1/p' "$src/tools/man-names")
    [ -n "$tools" ] || fail "no tool named in $src/tools/man-names"
    for t in $tools; do
        m=$(find "$dest" -name "$t.1")
        [ -n "$m" ] && head -3 "$m" | grep -q '^\.TH' || fail "no man page $t.1 installed"
        grep -q '^\.SH "SEE ALSO"' "$m" || fail "$t.1 has no SEE ALSO"
    done
    grep -qF '\fB\-\-timeout\fR S' "$(find "$dest" -name flxrun.1)" || fail "flxrun.1 lacks --timeout"
    for v in FLX_TIMEOUT FLX_NET FLX_JOB_SECRET; do
        grep -q "^\.B $v\$" "$(find "$dest" -name flx-info.1)" || fail "flx-info.1 lacks $v"
    done
else
    echo "no help2man at configure time: no man pages to check"
fi

# the README's line, with the staging directory as the sysroot and an
# rpath standing for ldconfig (README: "Build your own program")
export PKG_CONFIG_SYSROOT_DIR="$dest" PKG_CONFIG_PATH="$dest$libdir/pkgconfig"
export PKG_CONFIG_LIBDIR="$dest$libdir/pkgconfig"
flags=$(pkg-config --cflags --libs flexcoll) || fail "pkg-config --cflags --libs flexcoll"
# the sanitizer build's library needs its runtime in the program too
${CC:-cc} ${FLX_TEST_CFLAGS:-} "$src/tools/example.c" $flags -Wl,-rpath,"$dest$libdir" \
    -o "$tmp/example" 2>"$tmp/cc.log" || fail "building example.c: $(cat "$tmp/cc.log")"
out=$("$dest$bindir/flxrun" -n 3 "$tmp/example" 2>&1) || fail "installed example: $out"
[ "$(echo "$out" | grep -c 'sum = 6 (expected 6)')" -eq 3 ] || fail "installed example: $out"

# the header on its own
printf '#include <flexcoll.h>\nint main(void) { return flx_version() == FLX_VERSION_CODE ? 0 : 1; }\n' \
    >"$tmp/h.c"
for std in c99 c11; do
    ${CC:-cc} -std=$std -Wall -Wextra -pedantic -Werror -fsyntax-only \
        $(pkg-config --cflags flexcoll) "$tmp/h.c" 2>"$tmp/h.log" ||
        fail "flexcoll.h as -std=$std -pedantic -Werror: $(cat "$tmp/h.log")"
done
if command -v g++ >/dev/null; then
    cp "$tmp/h.c" "$tmp/h.cc"
    g++ -std=c++11 -Wall -Wextra -pedantic -Werror ${FLX_TEST_CFLAGS:-} "$tmp/h.cc" $flags \
        -Wl,-rpath,"$dest$libdir" -o "$tmp/hxx" 2>"$tmp/h.log" ||
        fail "flexcoll.h from C++11: $(cat "$tmp/h.log")"
    "$tmp/hxx" || fail "a C++ program's FLX_VERSION_CODE differs from flx_version()"
fi

# only the header's names leave the shared library
so=$(ls "$dest$libdir"/libflexcoll.so.* 2>/dev/null | head -1)
[ -n "$so" ] || fail "no libflexcoll.so.* in $dest$libdir"
nm -D --defined-only "$so" | awk '{print $3}' | sort >"$tmp/exported"
grep -v '^flx_' "$tmp/exported" >"$tmp/stray" && fail "exported beyond flx_*: $(head -5 "$tmp/stray")"
sed -n 's/^FLX_API .*[ *]\(flx_[a-z0-9_]*\)(.*/\1/p' "$src/include/flexcoll.h" | sort >"$tmp/declared"
cmp -s "$tmp/exported" "$tmp/declared" ||
    fail "exported and declared differ: $(diff "$tmp/declared" "$tmp/exported" | head -5)"

# one version: header, library, pkg-config, flx-info
hv=$(sed -n 's/^#define FLX_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' \
    "$dest$prefix/include/flexcoll.h" | paste -sd.)
pv=$(pkg-config --modversion flexcoll)
iv=$("$dest$bindir/flx-info" --version) || fail "flx-info --version failed"
[ "$iv" = "flexcoll $hv" ] && [ "$pv" = "$hv" ] ||
    fail "versions: header $hv, pkg-config $pv, flx-info '$iv'"
"$dest$bindir/flx-info" --help | grep -q -- "--version" || fail "flx-info --help lacks --version"

# the static archive, where configure --enable-static built one
if [ -f "$dest$libdir/libflexcoll.a" ]; then
    nm -g --defined-only "$dest$libdir/libflexcoll.a" | awk 'NF == 3 {print $3}' |
        grep -v '^flx_' >"$tmp/stray" && fail "libflexcoll.a exposes $(head -5 "$tmp/stray")"
    printf '#include <flexcoll.h>\nint model_setup(void) { return 0; }\nint sock_connect(void) { return 0; }\nint main(void) { return flx_version() == FLX_VERSION_CODE ? model_setup() + sock_connect() : 1; }\n' \
        >"$tmp/s.c"
    ${CC:-cc} ${FLX_TEST_CFLAGS:-} "$tmp/s.c" -o "$tmp/s" $(pkg-config --static --cflags flexcoll) \
        "$dest$libdir/libflexcoll.a" $(pkg-config --static --libs-only-l flexcoll | sed 's/-lflexcoll//') \
        2>"$tmp/s.log" || fail "static link: $(cat "$tmp/s.log")"
    "$tmp/s" || fail "statically linked program failed"
    echo "test_install.sh: static archive checked"
fi

make -s -C "$top" uninstall DESTDIR="$dest" >"$tmp/uninstall.log" 2>&1 ||
    fail "make uninstall: $(tail -5 "$tmp/uninstall.log")"
left=$(find "$dest" -type f | head -5)
[ -z "$left" ] || fail "make uninstall left $left"
echo "test_install.sh: passed"
