#!/usr/bin/env bash
# Two "hosts" on one machine, built from Linux namespaces, for jobs that span hosts:
#
#   tests/mpi/hosts.sh up PREFIX [SUBNET]    create hosts PREFIX-a and PREFIX-b
#   tests/mpi/hosts.sh exec HOST CMD [ARGS...]
#                                            run CMD on HOST (its namespaces, same files)
#   tests/mpi/hosts.sh rsh [OPTS] HOST CMD...
#                                            what ssh would do: run the words CMD... as one
#                                            shell command on HOST (an MPI launcher's agent)
#   tests/mpi/hosts.sh link PREFIX DEV SUBNET MTU
#                                            join the hosts by a second network too: a veth
#                                            DEV on both, SUBNET.1 on -a, SUBNET.2 on -b
#   tests/mpi/hosts.sh agent PREFIX          path of an agent script for mpiexec/mpirun
#   tests/mpi/hosts.sh down PREFIX           kill everything on both hosts, delete them
#   tests/mpi/hosts.sh reap STEM             delete hosts STEM<pid>-* whose creator is gone
#
# A host is what a real cluster node is to the transports:
#  - its own network namespace, the two joined by a veth (interface udz0 on both, SUBNET.1 on
#    -a and SUBNET.2 on -b, default 10.213.7; made by tests/fault/netns.sh), and its own
#    loopback: ud_zcopy between hosts goes over the veth;
#  - its own kernel boot id (a random one bind-mounted over /proc/sys/kernel/random/boot_id):
#    UCX's system id comes from it, and it is what tells real hosts apart for UCX's posix and
#    cma and for rdmach and unimem (same boot id and PID namespace, uct/common/ucx_ext_sm.h);
#  - its own IPC namespace (UCX's posix and sysv also compare it) and its own /dev/shm (a tmpfs
#    of its own), so no shared-memory transport crosses;
#  - its own host name (UTS namespace) and an /etc/hosts naming both hosts, so that MPI
#    launchers see two nodes and reach each other by name.
# Files, users, pids and the CPUs are shared (so Open MPI is told not to bind: hosts_exec).
# The hosts keep the machine's PID namespace on
# purpose: an MPI launcher on one host starts the other host's daemons through `rsh`, and a
# process can enter the network, IPC, UTS and mount namespaces of a sibling, but never a PID
# namespace that is not below its own. A host is held open by one process (a sleep); `exec`
# enters its namespaces with nsenter. `down` kills every process in a host's namespaces.
#
# PREFIX must be STEM<pid> (pid of the process that owns the hosts): `reap` relies on it.
# State (the holders' pids, the hosts file, the agent) is in /tmp/ucx-ext-hosts/PREFIX.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
self=$here/hosts.sh
state_root=/tmp/ucx-ext-hosts
. "$here/../fault/netns.sh"

die() { echo "hosts: $*" >&2; exit 2; }

# The holder of HOST's namespaces (its pid here), or nothing.
holder_pid() { # host
  local prefix=${1%-[ab]} f
  f=$state_root/$prefix/${1##*-}.pid
  [ -f "$f" ] && cat "$f"
}

hosts_up() { # prefix [subnet]
  local p=$1 net=${2:-10.213.7} st=$state_root/$1 side ns pid i
  [[ $p =~ [0-9]+$ ]] || die "PREFIX must end in the owner's pid, got '$p'"
  mkdir -p "$st" || return 1
  printf '127.0.0.1 localhost\n%s.1 %s-a\n%s.2 %s-b\n' "$net" "$p" "$net" "$p" >"$st/hosts"
  printf '#!/bin/sh\nexec %q rsh "$@"\n' "$self" >"$st/agent"
  chmod +x "$st/agent"
  udz_ns_up "$p" "$net" || { rm -rf "$st"; return 1; }
  for side in a b; do
    ns=$p-$side
    rm -f "$st/$side.ready"
    cat /proc/sys/kernel/random/uuid >"$st/$side.boot_id"
    # ip netns exec and unshare exec: the background job is the holder itself
    setsid ip netns exec "$ns" unshare --ipc --uts --mount --propagation private /bin/sh -c '
        hostname "$1" && mount -t tmpfs -o mode=1777,size=1g tmpfs /dev/shm &&
        mount --bind "$2/hosts" /etc/hosts &&
        mount --bind "$2/$3.boot_id" /proc/sys/kernel/random/boot_id &&
        touch "$2/$3.ready" && exec sleep infinity
      ' holder "$ns" "$st" "$side" </dev/null >"$st/$side.log" 2>&1 &
    pid=$!
    for i in $(seq 100); do
      [ -f "$st/$side.ready" ] && break
      sleep 0.05
    done
    [ -f "$st/$side.ready" ] || { cat "$st/$side.log" >&2; hosts_down "$p"; die "host $ns did not come up"; }
    echo "$pid" >"$st/$side.pid"
  done
}

hosts_down() { # prefix
  local p=$1 st=$state_root/$1 side pid mnt f pids
  for side in a b; do
    pid=$(cat "$st/$side.pid" 2>/dev/null) || continue
    # everything that entered the host shares its mount namespace
    mnt=$(readlink "/proc/$pid/ns/mnt" 2>/dev/null) || continue
    pids=()
    for f in /proc/[0-9]*/ns/mnt; do
      [ "$(readlink "$f" 2>/dev/null)" = "$mnt" ] && { f=${f#/proc/}; pids+=("${f%%/*}"); }
    done
    [ ${#pids[@]} -gt 0 ] && kill -KILL "${pids[@]}" 2>/dev/null
  done
  udz_ns_down "$p"
  rm -rf "$st"
}

hosts_link() { # prefix dev subnet mtu
  local p=$1 dev=$2 net=$3 mtu=$4 i
  ip -n "$p-a" link add "$dev" type veth peer name "$dev" netns "$p-b" &&
  ip -n "$p-a" addr add "$net.1/24" dev "$dev" && ip -n "$p-b" addr add "$net.2/24" dev "$dev" &&
  ip -n "$p-a" link set "$dev" mtu "$mtu" up && ip -n "$p-b" link set "$dev" mtu "$mtu" up ||
    return 1
  for i in $(seq 50); do
    ip -n "$p-a" -br link show "$dev" | grep -q LOWER_UP &&
      ip -n "$p-b" -br link show "$dev" | grep -q LOWER_UP && return 0
    sleep 0.1
  done
  die "link $dev did not come up"
}

hosts_exec() { # host cmd...
  local h=$1 pid; shift
  pid=$(holder_pid "$h") || true
  [ -n "$pid" ] && [ -d "/proc/$pid" ] || die "no host $h (tests/mpi/hosts.sh up PREFIX first)"
  # The hosts share this machine's CPUs, and Open MPI binds each host's ranks from core 0 up:
  # one rank per host put every rank on CPU 0, time-sliced against each other, and a round
  # trip across took one scheduler tick (4 ms). MPICH's Hydra does not bind by default.
  export OMPI_MCA_hwloc_base_binding_policy=${OMPI_MCA_hwloc_base_binding_policy:-none}
  exec nsenter -t "$pid" --net --ipc --uts --mount --wd="$PWD" -- "$@"
}

case ${1:-} in
  up) shift; [ $# -ge 1 ] || die "up PREFIX [SUBNET]"; hosts_up "$@" ;;
  down) shift; [ $# -eq 1 ] || die "down PREFIX"; hosts_down "$1" ;;
  exec) shift; [ $# -ge 2 ] || die "exec HOST CMD [ARGS...]"; hosts_exec "$@" ;;
  rsh)
    shift
    # ssh-style: options first (ignored), then the host, then the words of one command line
    while [ $# -gt 0 ] && [[ $1 == -* ]]; do shift; done
    [ $# -ge 2 ] || die "rsh HOST CMD..."
    h=$1; shift
    hosts_exec "$h" /bin/sh -c "$*"
    ;;
  link) shift; [ $# -eq 4 ] || die "link PREFIX DEV SUBNET MTU"; hosts_link "$@" ;;
  agent) shift; [ $# -eq 1 ] || die "agent PREFIX"; echo "$state_root/$1/agent" ;;
  reap)
    shift; [ $# -eq 1 ] || die "reap STEM"
    for d in "$state_root/$1"*; do
      [ -d "$d" ] || continue
      owner=${d##*[!0-9]}
      [ -n "$owner" ] && ! kill -0 "$owner" 2>/dev/null && hosts_down "${d##*/}"
    done
    udz_ns_reap "$1"
    ;;
  *) sed -n '2,/^set -uo/{/^#/s/^# \{0,1\}//p}' "$0" >&2; exit 2 ;;
esac
