#!/usr/bin/env bash
# Two network namespaces joined by a veth pair, and nftables loss injection in them.
# Shared by tests/fault/run and `perf/bench udzcopy`. Use it sourced (functions) or as a command:
#
#   tests/fault/netns.sh up PREFIX [SUBNET]     create PREFIX-a, PREFIX-b (veth udz0 in each,
#                                               SUBNET.1/24 in a, SUBNET.2/24 in b; default
#                                               10.213.1); lo up in both
#   tests/fault/netns.sh down PREFIX            kill what still runs in them, delete both
#   tests/fault/netns.sh loss PREFIX PCT [udp|udp+tcp] [datagram|run]
#                                               drop PCT% of the UDP datagrams (udp+tcp: and of
#                                               the TCP segments) arriving on udz0, at random,
#                                               in both namespaces (0 = remove rules); per
#                                               datagram (default) or per GSO run, see below
#   tests/fault/netns.sh counters PREFIX        print "NS udp_in N dropped M" per namespace
#                                               (udp_in: packets the rule looked at)
#   tests/fault/netns.sh reap STEM              delete namespaces STEM<pid>-a/-b whose creating
#                                               process <pid> is gone (leftovers of killed runs)
#
# PREFIX must be STEM<pid> (pid of the process that owns the namespaces), e.g. udzf12345: `reap`
# relies on it. Names: "<PREFIX>-a"/"<PREFIX>-b". Both veth ends are called udz0 inside their
# namespace, so one UCX_NET_DEVICES=udz0 fits both sides.
#
# Loss: one table "inet udzloss" per namespace with an input chain: UDP arriving on udz0 is
# counted, then dropped when `numgen random mod 100 < PCT`. Only UDP is touched, so the TCP
# out-of-band connections of ucx_perftest/MPICH are not; every packet meets exactly one rule
# (its receiver's), so the loss rate is PCT% in each direction. UNIT says what a packet is:
#   datagram (default when PCT > 0)  both udz0 get gso_max_segs 1: a GSO run (UDP, or tcp's
#                       64 KiB segments) is cut into wire-sized packets before the veth, and
#                       the rule decides per datagram, as loss on a real wire would (with PCT 0:
#                       the same wire without loss, the reference for the loss figures);
#   run (default when PCT is 0)  a GSO run crosses the veth whole (and reaches the socket
#                       coalesced), so the rule drops whole runs, as it drops whole 64 KiB tcp
#                       segments.
set -uo pipefail

udz_ns_up() { # prefix [subnet]
  local p=$1 net=${2:-10.213.1}
  local a=$p-a b=$p-b
  ip netns add "$a" || return 1
  ip netns add "$b" || { ip netns del "$a"; return 1; }
  ip -n "$a" link add udz0 type veth peer name udz0 netns "$b" &&
  ip -n "$a" addr add "$net.1/24" dev udz0 &&
  ip -n "$b" addr add "$net.2/24" dev udz0 &&
  ip -n "$a" link set lo up && ip -n "$b" link set lo up &&
  ip -n "$a" link set udz0 up && ip -n "$b" link set udz0 up || { udz_ns_down "$p"; return 1; }
  # wait until the link is up on both ends (veth carrier comes with the peer)
  local i
  for i in $(seq 50); do
    ip -n "$a" -br link show udz0 | grep -q 'LOWER_UP' &&
      ip -n "$b" -br link show udz0 | grep -q 'LOWER_UP' && return 0
    sleep 0.1
  done
  echo "netns: udz0 did not come up" >&2
  return 1
}

udz_ns_down() { # prefix
  local p=$1 ns pids
  for ns in "$p-a" "$p-b"; do
    ip netns list | awk '{print $1}' | grep -qxF "$ns" || continue
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
    ip -n "$ns" link del udz0 2>/dev/null   # takes the peer end with it
    ip netns del "$ns" 2>/dev/null || echo "netns: could not delete $ns" >&2
  done
  return 0
}

udz_ns_loss() { # prefix pct [udp|udp+tcp] [datagram|run]
  local p=$1 pct=$2 proto=${3:-udp} unit=${4:-} ns match segs=65535
  [ -n "$unit" ] || { [ "$pct" = 0 ] && unit=run || unit=datagram; }
  case $proto in
    udp) match="meta l4proto udp" ;;
    udp+tcp) match="meta l4proto { udp, tcp }" ;;  # the benchmark's tcp baseline
    *) echo "netns: loss protocol must be udp or udp+tcp, got '$proto'" >&2; return 2 ;;
  esac
  case $unit in
    datagram) segs=1 ;;
    run) ;;
    *) echo "netns: loss unit must be datagram or run, got '$unit'" >&2; return 2 ;;
  esac
  for ns in "$p-a" "$p-b"; do
    ip netns exec "$ns" nft delete table inet udzloss 2>/dev/null
    ip -n "$ns" link set udz0 gso_max_segs "$segs" || return 1
    [ "$pct" = 0 ] && continue
    ip netns exec "$ns" nft -f - <<NFT || return 1
table inet udzloss {
  chain input {
    type filter hook input priority 0; policy accept;
    iifname "udz0" $match counter comment "udp_in"
    iifname "udz0" $match numgen random mod 100 < $pct counter drop comment "dropped"
  }
}
NFT
  done
}

# "NS udp_in N dropped M" per namespace (zeros when no rules are loaded)
udz_ns_counters() { # prefix
  local p=$1 ns in drop
  for ns in "$p-a" "$p-b"; do
    in=0 drop=0
    local out
    out=$(ip netns exec "$ns" nft list table inet udzloss 2>/dev/null)
    if [ -n "$out" ]; then
      in=$(sed -nE 's/.*counter packets ([0-9]+).*comment "udp_in".*/\1/p' <<<"$out")
      drop=$(sed -nE 's/.*counter packets ([0-9]+).*comment "dropped".*/\1/p' <<<"$out")
    fi
    echo "$ns udp_in ${in:-0} dropped ${drop:-0}"
  done
}

udz_ns_reap() { # stem: deletes STEM<pid>-a/-b when <pid> is not running
  local stem=$1 ns pid
  for ns in $(ip netns list | awk '{print $1}'); do
    [[ $ns =~ ^${stem}([0-9]+)-[ab]$ ]] || continue
    pid=${BASH_REMATCH[1]}
    kill -0 "$pid" 2>/dev/null && continue
    echo "netns: removing leftover $ns of a run that is gone (pid $pid)" >&2
    udz_ns_down "$stem$pid"
  done
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  cmd=${1:-}; shift || true
  case $cmd in
    up) udz_ns_up "$@" ;;
    down) udz_ns_down "$@" ;;
    loss) udz_ns_loss "$@" ;;
    counters) udz_ns_counters "$@" ;;
    reap) udz_ns_reap "$@" ;;
    *) sed -n '2,/^set -uo/{/^#/s/^# \{0,1\}//p}' "$0" >&2; exit 2 ;;
  esac
fi
