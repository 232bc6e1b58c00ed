/*
 * ud_zcopy UDP wire: one control socket per iface (eager traffic, acks, control) and a pool of
 * data-channel sockets (Koop, Sur, Panda's pool of UD QPs for zero-copy transfers). Plain C, no
 * UCX: the glue reaches it only through its table, udz_udp_wire (udz_wire.h); the unit tests
 * use the functions below too. Receives and sends are batched with recvmmsg/sendmmsg and
 * scatter/gather straight from/to the iovecs the core gives.
 *   udz_udp.c       devices, sockets, the addresses UCP exchanges, the control socket, the
 *                   table
 *   udz_udp_chan.c  the data channels: GSO send runs, GRO receive runs, recvmmsg
 *   udz_udp_ready.c whether anything arrived on the control socket, without a system call
 *                   while the wire is idle (io_uring)
 *   udz_udp_route.c the routes to peers: their MTU, and whether this device's datagrams fit
 * Each file calls only those below it in this list (tests/docs/layout). What udz_udp.c and
 * udz_udp_chan.c both use on a datagram's path (the core's names of UDP addresses, recvmmsg's
 * headers) is static inline below: it costs those paths no call, and neither file calls the
 * other for it.
 */
#ifndef UDZ_UDP_H
#define UDZ_UDP_H

#include "udz_wire.h"

#include <linux/io_uring.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#ifdef __cplusplus
extern "C" {
#endif

#define UDZ_UDP_BATCH      64
/* Blocks of consecutive ports (control + channels) tried at open before giving up. */
#define UDZ_UDP_BLOCK_TRIES 64
#define UDZ_UDP_GRO_OFF    256      /* uncoalesced datagrams in a row: GRO off on the channel */
#define UDZ_UDP_GRO_PROBE  8192     /* datagrams later: GRO on again, to see if runs come */
/* The largest UDP payload over IPv4: 65535 - 20 (IP header) - 8 (UDP header). */
#define UDZ_UDP_MAX_DGRAM  65507u
/* IPv4 and UDP headers: a datagram of MTU - this crosses the interface unfragmented. */
#define UDZ_UDP_HDRS       28u
/* Routes to peer addresses kept per wire (udz_udp_route.c): 2^bits entries. */
#define UDZ_UDP_ROUTE_BITS 6
/* A coalesced run: the kernel's UDP GSO and GRO take at most 64 segments and 64 KiB. */
#define UDZ_UDP_RUN_DGRAMS 64u
#define UDZ_UDP_RUN_BYTES  65536u
/* Bytes one GSO send groups (a little under the 64 KiB of an IP packet). */
#define UDZ_UDP_GSO_BYTES  65000u
/* The control socket with UDP_GRO: receive buffers of the wire's own, UDZ_UDP_RUN_BYTES each
 * (a whole coalesced run fits), one recvmmsg fills up to this many. 16 x 64 KiB = 1 MiB of
 * address space per iface, of which only what runs touch becomes resident (a small datagram
 * touches one page); RX_BATCH (64) of them would be 4 MiB. Small datagrams are still batched,
 * up to 16 per call (the core offers RX_BATCH, 32 by default). */
#define UDZ_UDP_CTL_BUFS   16
/* Their stride: a run's size and four cache lines, so that the buffers' first lines (where
 * small datagrams and every run's first header land) fall into different cache sets; at a
 * stride of 64 KiB all sixteen mapped to one set of L1 and of L2, more than their ways. */
#define UDZ_UDP_CTL_STRIDE (UDZ_UDP_RUN_BYTES + 256u)

/* Empty receives in a row after which the control socket counts as idle: from then on a poll
 * asks the readiness ring first (udz_udp_ready.c). About 30 us of polling at the ~0.5 us of
 * an empty recvmmsg: a peer that answers sooner than that is never waited for through the
 * ring, whose wakeup costs ~0.5 us more than a plain receive. */
#define UDZ_READY_IDLE_POLLS 64

/* An io_uring holding one multishot poll of a socket (udz_udp_ready.c). */
struct io_uring_sqe;
struct io_uring_cqe;
typedef struct udz_udp_ready {
    int                  fd;        /* the ring; -1: none (every poll receives) */
    int                  sock;
    int                  armed;     /* a poll request is in the kernel (or its completion in
                                     * the ring, not yet consumed) */
    void                 *sq_ring, *cq_ring;
    size_t               sq_ring_len, cq_ring_len, sqes_len;
    struct io_uring_sqe  *sqes;
    struct io_uring_cqe  *cqes;
    unsigned             *sq_tail, *sq_flags, *sq_array, *cq_head, *cq_tail;
    unsigned             sq_mask, cq_mask;
} udz_udp_ready_t;

/* 0, or -errno when this kernel or process cannot have the ring (r->fd is then -1). Not
 * armed yet. */
int udz_udp_ready_open(udz_udp_ready_t *r, int sock);
void udz_udp_ready_close(udz_udp_ready_t *r);
/* Submits a one-shot poll of the socket (an idle spell begins): 0 or -errno. */
int udz_udp_ready_arm(udz_udp_ready_t *r);
/* Armed: 1 when the request completed or is about to (consumed: armed again next spell),
 * receive now; 0: nothing arrived. */
int udz_udp_ready_wakeup(udz_udp_ready_t *r);

/* 1 when the ring is armed and has seen no wakeup since the last udz_udp_ready_wakeup; reads
 * three words and changes nothing (on every progress call of an idle iface: inline). */
static inline int udz_udp_ready_quiet(const udz_udp_ready_t *r)
{
    return r->armed &&
           !(__atomic_load_n(r->sq_flags, __ATOMIC_ACQUIRE) &
             (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW)) &&
           (*r->cq_head == __atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE));
}

typedef struct udz_udp {
    int             fd;                         /* control */
    int             epfd;                       /* wakeup: epoll over every socket, -1
                                                 * until the glue asks for it */
    int             chan_fd[UDZ_MAX_CHANNELS];
    uint16_t        chan_port[UDZ_MAX_CHANNELS]; /* network byte order */
    unsigned        nchan;
    struct in_addr  ip;
    uint16_t        port;                       /* network byte order */
    unsigned        dev_mtu;                    /* the device's; 0: not known */
    uint64_t        route_cache[1u << UDZ_UDP_ROUTE_BITS]; /* address << 32 | route's MTU */
    int             rcvbuf, sndbuf;             /* what the kernel granted */
    int             errq;                       /* an ICMP error waits in the error queue */
    udz_udp_ready_t ready;                      /* the control socket's readiness ring */
    unsigned        idle;                       /* empty control receives in a row */
    int             more;                       /* the last receive filled its batch */
    udz_wire_counters_t *counters;              /* NULL: none kept */
    int             gso;                        /* UDP_SEGMENT works: batch equal datagrams */
    int             gro;                        /* data channels may take coalesced runs */
    /* per data channel: UDP_GRO on now; datagrams in a row that came uncoalesced (GRO on) or
     * since GRO was switched off. A path that never coalesces (no GSO across it, no GRO in
     * the NIC) is read with recvmmsg, a call per batch instead of a call per datagram; every
     * UDZ_UDP_GRO_PROBE datagrams GRO is tried again. */
    uint8_t         chan_gro[UDZ_MAX_CHANNELS];
    uint32_t        chan_count[UDZ_MAX_CHANNELS];
    struct iovec    gro_iov[2 * UDZ_UDP_RUN_DGRAMS];
    uint64_t        gro_cmsg[4];
    struct iovec    gso_iov[UDZ_UDP_BATCH * (1 + UDZ_MAX_IOV)];
    int             gso_count[UDZ_UDP_BATCH];
    uint64_t        gso_cmsg[UDZ_UDP_BATCH][4];
    struct mmsghdr  mm[UDZ_UDP_BATCH];
    struct sockaddr_in names[UDZ_UDP_BATCH];
    /* the control socket with UDP_GRO (udz_udp_recv_runs): what the last recvmmsg put in the
     * wire's buffers, handed to the core datagram by datagram across calls. ctl_n buffers
     * filled, ctl_i the one being cut, ctl_off the next datagram's offset in it; per buffer its
     * bytes (0: dropped), datagram size (0: one datagram) and sender. ctl_dropped counts
     * receives dropped as odd (truncated, gso_size 0 or beyond the run). pend_efd: an eventfd
     * in the epoll set (-1 until event_fd), readable while datagrams are held here. */
    int             ctl_gro;
    unsigned char   *ctl_buf;                   /* UDZ_UDP_CTL_BUFS x UDZ_UDP_CTL_STRIDE */
    int             ctl_n, ctl_i;
    size_t          ctl_off;
    size_t          ctl_len[UDZ_UDP_CTL_BUFS];
    size_t          ctl_seg[UDZ_UDP_CTL_BUFS];
    udz_addr_t      ctl_src[UDZ_UDP_CTL_BUFS];
    uint64_t        ctl_dropped;
    int             pend_efd, pend_sig;
    struct iovec    ctl_iov[UDZ_UDP_CTL_BUFS];
    uint64_t        ctl_cmsg[UDZ_UDP_CTL_BUFS][4];
    struct mmsghdr  ctl_mm[UDZ_UDP_CTL_BUFS];
    struct sockaddr_in ctl_names[UDZ_UDP_CTL_BUFS];
} udz_udp_t;

/* The table (udz_wire.h). */
extern const udz_wire_ops_t udz_udp_wire;

/* Opens the control socket and nchan data channels bound to ip (port 0: any). rcvbuf/sndbuf are
 * asked for (SO_RCVBUFFORCE first, so root gets them beyond rmem_max). gro: let the data
 * channels receive coalesced runs of datagrams (UDP_GRO), one receive call per run, if the
 * kernel can. Returns 0 or -errno with a message in err. */
int udz_udp_open(udz_udp_t *u, struct in_addr ip, unsigned nchan, int rcvbuf, int sndbuf,
                 int gro, char *err, size_t errlen);
void udz_udp_close(udz_udp_t *u);

/* The core's name of ip:port (port in network byte order), and back. */
static inline void udz_udp_addr_make(struct in_addr ip, uint16_t port_be, udz_addr_t *out)
{
    memset(out, 0, sizeof(*out));
    memcpy(out->b, &ip, 4);
    memcpy(out->b + 4, &port_be, 2);
}

static inline void udz_udp_addr_split(const udz_addr_t *a, struct in_addr *ip,
                                      uint16_t *port_be)
{
    memcpy(ip, a->b, 4);
    memcpy(port_be, a->b + 4, 2);
}

/* Whether a datagram of the device's MTU from this wire's address reaches dst unfragmented:
 * 1 yes, 0 the route's MTU is smaller, -1 not known. */
int udz_udp_route_fits(udz_udp_t *u, struct in_addr dst);
/* The wire op path_mtu (udz_wire.h): the route's MTU towards dst less the IP and UDP headers,
 * 0 when unknown. */
size_t udz_udp_path_mtu(void *wire, const udz_addr_t *dst);

/* MTU of the interface that has this address (0 if unknown). */
unsigned udz_udp_mtu(const char *ifname);

/* ---- shared by udz_udp.c and udz_udp_chan.c ---- */

/* Sends n datagrams to dst (the table's send and chan_send). */
int udz_udp_send(void *wire, const udz_addr_t *dst, const udz_txmsg_t *msgs, int n);
/* n > 1 datagrams to sin: GSO runs when the path takes them, else one sendmmsg. */
int udz_udp_send_many(udz_udp_t *u, struct sockaddr_in *sin, const udz_txmsg_t *msgs, int n);
/* The sender's control address as the core names it (zeros when not an IPv4 sender). */
static inline void udz_udp_src_addr(const struct sockaddr_in *name, socklen_t namelen,
                                    udz_addr_t *out)
{
    if ((namelen == sizeof(*name)) && (name->sin_family == AF_INET)) {
        udz_udp_addr_make(name->sin_addr, name->sin_port, out);
    } else {
        memset(out, 0, sizeof(*out));
    }
}
/* recvmmsg's headers for msgs[0..n) (the control socket's receive and a data channel's
 * without GRO) and, after it returned rc, the results into msgs. */
static inline void udz_udp_mm_prep(udz_udp_t *u, udz_rxmsg_t *msgs, int n)
{
    int i;

    for (i = 0; i < n; ++i) {
        memset(&u->mm[i], 0, sizeof(u->mm[i]));
        u->mm[i].msg_hdr.msg_name    = &u->names[i];
        u->mm[i].msg_hdr.msg_namelen = sizeof(u->names[i]);
        u->mm[i].msg_hdr.msg_iov     = msgs[i].iov;
        u->mm[i].msg_hdr.msg_iovlen  = (msgs[i].iov[1].iov_len > 0) ? 2 : 1;
    }
}

static inline void udz_udp_mm_done(udz_udp_t *u, udz_rxmsg_t *msgs, int rc)
{
    int i;

    for (i = 0; i < rc; ++i) {
        msgs[i].unreach = 0;
        msgs[i].len   = u->mm[i].msg_len;
        msgs[i].trunc = !!(u->mm[i].msg_hdr.msg_flags & MSG_TRUNC);
        udz_udp_src_addr(&u->names[i], u->mm[i].msg_hdr.msg_namelen, &msgs[i].src);
    }
}
/* One receive of the GRO control socket, rc bytes with header mh: the size of its datagrams
 * (the UDP_GRO cmsg's gso_size; 0: one datagram, no cmsg), or -1 when it is dropped as odd
 * (truncated, control truncated, gso_size 0 or larger than the run). */
long udz_udp_ctl_seg(const struct msghdr *mh, size_t rc);
/* Datagrams held in the wire from a coalesced run, not yet handed to the core. */
static inline int udz_udp_ctl_pending(const udz_udp_t *u)
{
    return u->ctl_i < u->ctl_n;
}
/* UDP_GRO on or off for one data channel; 0 when the kernel took it. */
int udz_udp_chan_set_gro(int fd, int on);
int udz_udp_chan_recv(void *wire, unsigned chan, udz_rxmsg_t *msgs, int n);
uint32_t udz_udp_chan_id(void *wire, unsigned chan);
int udz_udp_chan_addr(void *wire, const udz_addr_t *ctrl, const udz_chans_t *chans,
                      uint32_t chan_id, udz_addr_t *out);

#ifdef __cplusplus
}
#endif
#endif
