/*
 * ud_zcopy UDP wire: one control socket per iface (eager traffic, acks, control) and a pool of
 * data-channel sockets (the seed's pool of UD QPs for zero-copy transfers). Plain C, no UCX:
 * the unit tests and the fuzzer use it directly. Receives and sends are batched with
 * recvmmsg/sendmmsg and scatter/gather straight from/to the iovecs the core gives.
 */
#ifndef UDZ_UDP_H
#define UDZ_UDP_H

#include "udz_core.h"

#include <netinet/in.h>

#ifdef __cplusplus
extern "C" {
#endif

#define UDZ_UDP_BATCH 64
#define UDZ_UDP_GRO_OFF    256      /* uncoalesced datagrams in a row: GRO off on the channel */
#define UDZ_UDP_GRO_PROBE  8192     /* datagrams later: GRO on again, to see if runs come */

typedef struct udz_udp {
    int             fd;                         /* control */
    int             chan_fd[UDZ_MAX_CHANNELS];
    uint16_t        chan_port[UDZ_MAX_CHANNELS]; /* network byte order */
    unsigned        nchan;
    struct in_addr  ip;
    uint16_t        port;                       /* network byte order */
    int             rcvbuf, sndbuf;             /* what the kernel granted */
    int             errq;                       /* an ICMP error waits in the error queue */
    int             gso;                        /* UDP_SEGMENT works: batch equal datagrams */
    int             gro;                        /* data channels may take coalesced runs */
    /* per data channel: UDP_GRO on now; datagrams in a row that came uncoalesced (GRO on) or
     * since GRO was switched off. A path that never coalesces (no GSO across it, no GRO in
     * the NIC) is read with recvmmsg, a call per batch instead of a call per datagram; every
     * UDZ_UDP_GRO_PROBE datagrams GRO is tried again. */
    uint8_t         chan_gro[UDZ_MAX_CHANNELS];
    uint32_t        chan_count[UDZ_MAX_CHANNELS];
    struct iovec    gro_iov[2 * 64];
    uint64_t        gro_cmsg[4];
    struct iovec    gso_iov[UDZ_UDP_BATCH * (1 + UDZ_MAX_IOV)];
    int             gso_count[UDZ_UDP_BATCH];
    uint64_t        gso_cmsg[UDZ_UDP_BATCH][4];
    struct mmsghdr  mm[UDZ_UDP_BATCH];
    struct sockaddr_in names[UDZ_UDP_BATCH];
} udz_udp_t;

extern const udz_wire_ops_t udz_udp_ops;

/* Opens the control socket and nchan data channels bound to ip (port 0: any). rcvbuf/sndbuf are
 * asked for (SO_RCVBUFFORCE first, so root gets them beyond rmem_max). gro: let the data
 * channels receive coalesced runs of datagrams (UDP_GRO), one receive call per run, if the
 * kernel can. Returns 0 or -errno with a message in err. */
int udz_udp_open(udz_udp_t *u, struct in_addr ip, unsigned nchan, int rcvbuf, int sndbuf,
                 int gro, char *err, size_t errlen);
void udz_udp_close(udz_udp_t *u);

void udz_udp_addr_make(struct in_addr ip, uint16_t port_be, udz_addr_t *out);
void udz_udp_addr_split(const udz_addr_t *a, struct in_addr *ip, uint16_t *port_be);

/* MTU of the interface that has this address (0 if unknown). */
unsigned udz_udp_mtu(const char *ifname);

#ifdef __cplusplus
}
#endif
#endif
