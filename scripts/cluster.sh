#!/bin/bash
# cluster.sh -- an emulated multi-host cluster on one machine (needs root).
#
#   cluster.sh up N [RATE] [--rate-of I=RATE ...]   N hosts flx-h0..flx-h{N-1}
#   cluster.sh down                                 remove every flx-* namespace
#   cluster.sh rate RATE [I]                        change the links' rate live
#   cluster.sh status                               namespaces, addresses, qdiscs
#   cluster.sh exec I CMD...                        run CMD inside host I
#   cluster.sh run N [--port P] [--timeout S] -- PROG ARGS...
#                                                   rank i of N inside flx-hi (via flxrun)
#
# Picture (N = 3):
#
#     flx-h0            flx-h1            flx-h2          host namespaces
#   eth0 10.77.0.1    eth0 10.77.0.2    eth0 10.77.0.3    tbf RATE on egress
#       |                 |                 |
#     h0 ---------------- h1 -------------- h2           flx-sw: bridge br0,
#                   (bridge br0)                         tbf RATE toward each host
#
# Every host's egress and the switch's egress toward it are shaped with
# `tc qdisc ... root tbf rate RATE`, so a host's link is RATE in each
# direction (RATE: 1gbit, 10gbit, 25gbit, 500mbit, ...; default 10gbit;
# "none" leaves the links unshaped).  --rate-of I=RATE gives host I another
# rate (a straggler).  Addresses are 10.77.0.(i+1)/24 and exist only inside
# these namespaces; loopback is up in each.  `up` removes any earlier cluster
# first, so running it twice gives the same state.  `down` removes whatever
# is there and never fails on a partial cluster.
#
# `rate RATE [I]` reshapes the running cluster without tearing it down: both
# directions of every host's link (or only host I's) get the new tbf rate and
# burst with `tc qdisc replace`, so connections and the jobs on them stay up
# and packets already queued are kept, to leave at the new rate ("none"
# removes the shaping).  E.g. `cluster.sh rate 100mbit` mid-run to see a job
# adapt to a slower network, `cluster.sh rate 1gbit 3` to make host 3 a
# straggler from now on.  The burst is 1 ms of traffic but at least 96 KiB
# here (64 KiB in `up`): packets queued at a higher rate may be GSO packets
# of ~68 kB (64 KiB of payload plus headers counted per segment), and a tbf
# never sends a head packet bigger than its bucket -- at 64 KiB the link
# would stall for good.
#
# `run` starts the ranks with flxrun (FLXRUN, else ./flxrun, build/flxrun or
# the one on PATH): flxrun gives FLX_RANK, FLX_SIZE, a fresh FLX_JOB_SECRET,
# [rank] prefixes, kill-the-rest-on-failure and the first failure's status;
# each rank then enters its namespace with FLX_ROOT=10.77.0.1:PORT and
# FLX_SOCKET_IFNAME=eth0.
set -u

NET=10.77.0
SW=flx-sw
PREFIX=flx-h
IFNAME=eth0

die() { echo "cluster.sh: $*" >&2; exit 2; }

# RATE (tc syntax) -> bytes per second, for the burst size.
rate_bytes() {
    local r=${1,,} num unit
    [[ $r =~ ^([0-9]+(\.[0-9]+)?)([kmgt]?)(bit|bps)$ ]] || return 1
    num=${BASH_REMATCH[1]} unit=${BASH_REMATCH[3]}
    awk -v n="$num" -v u="$unit" -v b="${BASH_REMATCH[4]}" 'BEGIN {
        m = 1; if (u == "k") m = 1e3; if (u == "m") m = 1e6; if (u == "g") m = 1e9; if (u == "t") m = 1e12
        v = n * m; if (b == "bit") v /= 8; printf "%.0f\n", v }'
}

# shape NS DEV RATE [MINBURST]: tbf with a burst of 1 ms of traffic (at least
# MINBURST, default 64 kB; tbf's watchdog is an hrtimer, so a small bucket
# still reaches the rate, and a big one would let messages of a few hundred kB
# pass at memory speed) and at most 20 ms of queue.
shape() {
    local ns=$1 dev=$2 rate=$3 minburst=${4:-65536} bps burst
    [ "$rate" = none ] && return 0
    bps=$(rate_bytes "$rate") || die "bad rate '$rate' (e.g. 1gbit, 10gbit, 500mbit)"
    burst=$((bps / 1000))
    [ "$burst" -lt "$minburst" ] && burst=$minburst
    ip netns exec "$ns" tc qdisc replace dev "$dev" root tbf rate "$rate" \
        burst "$burst" latency 20ms
}

cluster_down() {
    local ns
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
        case $ns in
        "$PREFIX"[0-9]* | "$SW") ip netns del "$ns" 2>/dev/null ;;
        esac
    done
    return 0
}

cluster_up() {
    local n=${1:-} rate=10gbit i r
    local -A over=()
    [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 250 ] || die "up: N must be 1..250"
    shift
    if [ $# -gt 0 ] && [[ $1 != --* ]]; then rate=$1; shift; fi
    while [ $# -gt 0 ]; do
        case $1 in
        --rate-of) [ $# -ge 2 ] || die "--rate-of needs I=RATE"; r=$2; shift 2 ;;
        --rate-of=*) r=${1#--rate-of=}; shift ;;
        *) die "up: unknown argument '$1'" ;;
        esac
        [[ $r =~ ^([0-9]{1,4})=(.+)$ ]] || die "--rate-of expects I=RATE (I a host number), not '$r'"
        [ "${BASH_REMATCH[1]}" -lt "$n" ] || die "--rate-of: no host ${BASH_REMATCH[1]}"
        over[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
    done
    for r in "$rate" "${over[@]}"; do
        [ "$r" = none ] || rate_bytes "$r" >/dev/null || die "bad rate '$r'"
    done

    cluster_down
    trap 'cluster_down; exit 1' ERR
    set -E
    ip netns add "$SW"
    ip -n "$SW" link set lo up
    ip -n "$SW" link add br0 type bridge
    ip -n "$SW" link set br0 up
    for ((i = 0; i < n; i++)); do
        local h=$PREFIX$i hr=${over[$i]:-$rate}
        ip netns add "$h"
        ip -n "$h" link set lo up
        ip -n "$SW" link add "h$i" type veth peer name "$IFNAME" netns "$h"
        ip -n "$SW" link set "h$i" master br0 up
        ip -n "$h" addr add "$NET.$((i + 1))/24" dev "$IFNAME"
        ip -n "$h" link set "$IFNAME" up
        shape "$h" "$IFNAME" "$hr"
        shape "$SW" "h$i" "$hr"
    done
    trap - ERR
    # wait until the ports forward (the bridge may keep them in "learning")
    for ((i = 0; i < 50; i++)); do
        ! ip -n "$SW" link show master br0 2>/dev/null | grep -q 'state DOWN\|LEARNING' && break
        sleep 0.1
    done
    echo "cluster: $n hosts, $NET.1-$NET.$n, rate $rate${over[*]:+, overrides: $(for k in "${!over[@]}"; do printf 'h%s=%s ' "$k" "${over[$k]}"; done)}"
}

cluster_rate() {
    local rate=${1:-} host=${2:-} ns i n=0
    [ -n "$rate" ] || die "rate: RATE missing (e.g. 1gbit, 100mbit, none)"
    [ "$rate" = none ] || rate_bytes "$rate" >/dev/null || die "bad rate '$rate' (e.g. 1gbit, 10gbit, 500mbit)"
    [ -z "$host" ] || [[ $host =~ ^[0-9]+$ ]] || die "rate: I must be a host number"
    [ $# -le 2 ] || die "rate: unexpected argument '$3'"
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | sort -V); do
        case $ns in "$PREFIX"[0-9]*) ;; *) continue ;; esac
        i=${ns#"$PREFIX"}
        [ -z "$host" ] || [ "$i" = "$host" ] || continue
        if [ "$rate" = none ]; then
            ip netns exec "$ns" tc qdisc del dev "$IFNAME" root 2>/dev/null
            ip netns exec "$SW" tc qdisc del dev "h$i" root 2>/dev/null
        else
            shape "$ns" "$IFNAME" "$rate" 98304 || die "rate: cannot shape $ns"
            shape "$SW" "h$i" "$rate" 98304 || die "rate: cannot shape h$i in $SW"
        fi
        n=$((n + 1))
    done
    [ $n -gt 0 ] || die "rate: no host${host:+ $PREFIX$host}; cluster.sh up N first"
    if [ -n "$host" ]; then echo "cluster: host $host at rate $rate"
    else echo "cluster: $n hosts at rate $rate"; fi
}

cluster_status() {
    local ns found=0
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | sort -V); do
        case $ns in
        "$PREFIX"[0-9]*)
            found=1
            printf '%-8s %-14s %s\n' "$ns" \
                "$(ip -n "$ns" -4 -o addr show dev "$IFNAME" 2>/dev/null | awk '{print $4}')" \
                "$(ip netns exec "$ns" tc qdisc show dev "$IFNAME" 2>/dev/null | grep -o 'tbf.*rate [^ ]*' | sed 's/ root.*rate / /')"
            ;;
        esac
    done
    [ $found = 1 ] || echo "cluster: down"
}

find_flxrun() {
    local here c
    here=$(cd "$(dirname "$0")/.." && pwd)
    for c in "${FLXRUN:-}" ./flxrun ./build/flxrun "$here/flxrun" "$here/build/flxrun" \
        "$(command -v flxrun 2>/dev/null)"; do
        [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return 0; }
    done
    return 1
}

cluster_run() {
    local n=${1:-} port=$((29400 + RANDOM % 2000)) timeout=() flxrun
    [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] || die "run: N must be a positive number"
    shift
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        case $1 in
        --port) [ $# -ge 2 ] || die "run: --port needs a port"
                [[ $2 =~ ^[0-9]+$ ]] && [ "$2" -ge 1 ] && [ "$2" -le 65535 ] || die "run: --port: not a port: '$2'"
                port=$2; shift 2 ;;
        --timeout) [ $# -ge 2 ] || die "run: --timeout needs seconds"
                   timeout=(--timeout "$2"); shift 2 ;;
        *) die "run: unknown argument '$1'" ;;
        esac
    done
    [ "${1:-}" = -- ] && shift
    [ $# -ge 1 ] || die "run: no program"
    ip netns list | grep -q "^$PREFIX$((n - 1))\b" || die "run: no host $PREFIX$((n - 1)); cluster.sh up $n first"
    flxrun=$(find_flxrun) || die "run: flxrun not found (set FLXRUN)"
    # a program named without a slash but present here is made absolute
    local prog=$1
    shift
    if [[ $prog != */* ]] && [ -x "./$prog" ]; then prog=$PWD/$prog;
    elif [[ $prog == */* ]]; then prog=$(cd "$(dirname "$prog")" && pwd)/$(basename "$prog"); fi
    exec "$flxrun" -n "$n" "${timeout[@]}" -- /bin/sh -c \
        'exec ip netns exec '"$PREFIX"'"$FLX_RANK" env FLX_ROOT='"$NET"'.1:'"$port"' FLX_SOCKET_IFNAME='"$IFNAME"' "$0" "$@"' \
        "$prog" "$@"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in   # namespaces and qdiscs need root: say so before ip does
up | down | rate | exec | run) [ "$(id -u)" = 0 ] || die "$cmd: the emulated cluster needs root" ;;
esac
case $cmd in
up) cluster_up "$@" ;;
down) cluster_down ;;
rate) cluster_rate "$@" ;;
status) cluster_status ;;
exec)
    [[ ${1:-} =~ ^[0-9]+$ ]] || die "exec: I must be a host number"
    h=$PREFIX$1
    shift
    [ $# -ge 1 ] || die "exec: no command"
    exec ip netns exec "$h" "$@"
    ;;
run) cluster_run "$@" ;;
*)
    case $cmd in '' | -h | --help) ;; *) echo "cluster.sh: unknown command '$cmd'" >&2 ;; esac
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
    [ -z "$cmd" ] || [ "$cmd" = -h ] || [ "$cmd" = --help ] || exit 2
    ;;
esac
