/*
 * ud_zcopy UDP wire: the routes to peers.
 *
 * path_mtu: the route's MTU towards a peer, which sizes a zero-copy transfer's chunks
 * (udz_zrx.c): 65535 through loopback, so a peer on this host gets 64 KiB datagrams whatever
 * device its iface is on.
 *
 * Reachability. An iface is one device, and its segments are cut to that device's MTU. Any
 * unicast address is reachable from a UDP socket, so on a host with two networks (eth0 and
 * ib0, or two links of different MTUs) UCP may pair this iface with a peer's address on the
 * other network. The datagrams then leave through the other device, and if its route takes
 * smaller ones the kernel refuses every run cut to ours (a GSO segment above the route's MTU:
 * EINVAL), which went out again at every retransmission timeout for ever: MPICH's Raccumulate
 * across two namespace hosts joined by links of MTU 1500 and 9000 hung on UCX 1.13.1. So a
 * peer is reachable from an iface when the route to it takes the device's datagrams whole. A
 * peer on another network of the same MTU stays reachable, as before: UCP 1.13 matches the
 * lanes a wireup message asks for against the addresses it packs, which are a subset of the
 * peer's, and fewer reachable pairs there can make the two ends of a simultaneous connect
 * choose differently ("endpoint reconfiguration not supported yet").
 *
 * UCP asks about every (iface, peer address) pair of every endpoint it wires up, so the
 * routes' MTUs are kept per wire in a small direct-mapped table: bounded whatever addresses
 * peers announce. A route that changes during a job matters only to endpoints made after it.
 */
#include "udz_udp.h"

#include <stdint.h>
#include <unistd.h>

/* The route's MTU from src to dst (the kernel's own lookup, policy routing included: a scratch
 * socket bound to src and connected to dst, since IP_MTU needs a connected socket); 0 when
 * unknown. */
static unsigned udz_route_mtu(struct in_addr src, struct in_addr dst, uint16_t port_be)
{
    struct sockaddr_in sin;
    int fd, mtu = 0;
    socklen_t len = sizeof(mtu);

    fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return 0;
    }
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr   = src;
    if (bind(fd, (struct sockaddr*)&sin, sizeof(sin)) == 0) {
        sin.sin_addr = dst;
        sin.sin_port = port_be;
        if ((connect(fd, (struct sockaddr*)&sin, sizeof(sin)) != 0) ||
            (getsockopt(fd, IPPROTO_IP, IP_MTU, &mtu, &len) != 0)) {
            mtu = 0;
        }
    }
    close(fd);
    return (mtu > 0) ? (unsigned)mtu : 0;
}

size_t udz_udp_path_mtu(void *wire, const udz_addr_t *dst)
{
    const udz_udp_t *u = wire;
    struct in_addr ip;
    uint16_t port_be;
    unsigned mtu;

    udz_udp_addr_split(dst, &ip, &port_be);
    mtu = udz_route_mtu(u->ip, ip, port_be);
    if (mtu <= UDZ_UDP_HDRS) {
        return 0;
    }
    return ((size_t)mtu - UDZ_UDP_HDRS < UDZ_UDP_MAX_DGRAM) ? (size_t)mtu - UDZ_UDP_HDRS :
                                                               UDZ_UDP_MAX_DGRAM;
}

int udz_udp_route_fits(udz_udp_t *u, struct in_addr dst)
{
    uint32_t key  = dst.s_addr;
    unsigned slot = (uint32_t)(ntohl(key) * 2654435761u) >> (32 - UDZ_UDP_ROUTE_BITS);
    uint64_t e    = __atomic_load_n(&u->route_cache[slot], __ATOMIC_RELAXED);
    unsigned mtu;

    if ((u->dev_mtu == 0) || (key == 0)) {
        return -1;
    }
    if ((e != 0) && ((uint32_t)(e >> 32) == key)) {
        mtu = (uint32_t)e;
    } else {
        mtu = udz_route_mtu(u->ip, dst, htons(9));  /* any port: the route is per address */
        /* one word, so that a thread reading the slot meanwhile sees one answer or the other */
        __atomic_store_n(&u->route_cache[slot], ((uint64_t)key << 32) | mtu, __ATOMIC_RELAXED);
    }
    if (mtu == 0) {
        return -1;
    }
    return mtu >= u->dev_mtu;
}
