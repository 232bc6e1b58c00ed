# Sourced by the tiers that start a TCP server (ucx_perftest, ucp_hello_world) for a client to
# reach on 127.0.0.1.
#
# free_port: a port no TCP socket on this host uses, below the kernel's ephemeral range. A port
# picked at random from that range can be a live connection's local port, and then the server's
# bind fails even with SO_REUSEADDR: the likeliest cause of a CI run in which both perftest
# processes of the install tier exited 255 (their logs were not printed then; now they are).
free_port() {
  local lo _hi p used i
  read -r lo _hi </proc/sys/net/ipv4/ip_local_port_range
  [ "$lo" -gt 12000 ] || lo=32768
  used=" $(ss -Htan 2>/dev/null | awk '{n = split($4, a, ":"); printf "%s ", a[n]}')"
  for i in 1 2 3 4 5 6 7 8 9 10; do
    p=$((10000 + RANDOM % (lo - 10000)))
    [[ $used == *" $p "* ]] || break
  done
  echo "$p"
}

# wait_listen PORT PID [SECONDS]: until something listens on TCP PORT (true), or PID has exited
# or SECONDS (10) have passed (false). A fixed sleep before the client starts loses the race on
# a loaded machine: the client's connect is refused and the server waits out its timeout.
wait_listen() {
  local i
  for ((i = 0; i < ${3:-10} * 20; i++)); do
    ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}
