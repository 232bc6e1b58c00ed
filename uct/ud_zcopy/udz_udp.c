/*
 * ud_zcopy UDP wire (see udz_udp.h): devices, sockets, the addresses UCP exchanges, the
 * control socket and the wire's table; the data channels' paths are in udz_udp_chan.c, which
 * calls nothing here (what both use is inline in udz_udp.h).
 */
#include "udz_udp.h"

#include <dirent.h>
#include <errno.h>
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/errqueue.h>
#include <netinet/udp.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

static void to_sockaddr(const udz_addr_t *a, struct sockaddr_in *sin)
{
    memset(sin, 0, sizeof(*sin));
    sin->sin_family = AF_INET;
    udz_udp_addr_split(a, &sin->sin_addr, &sin->sin_port);
}

static int set_buf(int fd, int force_opt, int opt, int want)
{
    int got = 0;
    socklen_t len = sizeof(got);

    if ((want > 0) && (setsockopt(fd, SOL_SOCKET, force_opt, &want, sizeof(want)) != 0)) {
        (void)setsockopt(fd, SOL_SOCKET, opt, &want, sizeof(want));  /* capped at [rw]mem_max */
    }
    (void)getsockopt(fd, SOL_SOCKET, opt, &got, &len);
    return got;
}

/* One socket bound to ip:port (host order; 0: any). */
static int open_one(struct in_addr ip, uint16_t port, int rcvbuf, int sndbuf, int *fd_p,
                    uint16_t *port_p, int *rcv_got, int *snd_got, char *err, size_t errlen)
{
    struct sockaddr_in sin;
    socklen_t len = sizeof(sin);
    int fd, e;

    fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        e = errno;
        snprintf(err, errlen, "socket(AF_INET, SOCK_DGRAM): %s", strerror(e));
        return -e;
    }
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr   = ip;
    sin.sin_port   = htons(port);
    if ((bind(fd, (struct sockaddr*)&sin, sizeof(sin)) != 0) ||
        (getsockname(fd, (struct sockaddr*)&sin, &len) != 0)) {
        e = errno;
        snprintf(err, errlen, "bind(%s): %s", inet_ntoa(ip), strerror(e));
        close(fd);
        return -e;
    }
    if (sndbuf > 0) {
        /* the sending socket learns of ICMP port unreachable: nobody listens there any more,
         * a peer that died (read from the error queue in udz_udp_recv). A hint only: the
         * kernel matches just the addresses the ICMP quotes, so anybody can forge one, and
         * the core probes the peer before it fails it (udz_peer_probe_start in udz_peer.c) */
        int one = 1;
        (void)setsockopt(fd, IPPROTO_IP, IP_RECVERR, &one, sizeof(one));
    }
    *rcv_got = set_buf(fd, SO_RCVBUFFORCE, SO_RCVBUF, rcvbuf);
    *snd_got = set_buf(fd, SO_SNDBUFFORCE, SO_SNDBUF, sndbuf);
    *fd_p    = fd;
    *port_p  = sin.sin_port;
    return 0;
}

/* Tries to bind a block: the control socket where the kernel puts it, the data channels on
 * the nchan ports right after it (0, -EADDRINUSE to try another block, or another -errno). */
static int udz_udp_try_block(udz_udp_t *u, struct in_addr ip, unsigned nchan, int rcvbuf,
                             int sndbuf, char *err, size_t errlen)
{
    unsigned i;
    int rc, r, s;

    rc = open_one(ip, 0, rcvbuf, sndbuf, &u->fd, &u->port, &u->rcvbuf, &u->sndbuf, err, errlen);
    if (rc != 0) {
        return rc;
    }
    if ((unsigned)ntohs(u->port) + nchan > 65535u) {
        return -EADDRINUSE;     /* the block would run past the last port */
    }
    for (i = 0; i < nchan; ++i) {
        /* data channels only receive: their buffer holds a transfer's window */
        rc = open_one(ip, (uint16_t)(ntohs(u->port) + 1 + i), rcvbuf, 0, &u->chan_fd[i],
                      &u->chan_port[i], &r, &s, err, errlen);
        if (rc != 0) {
            return rc;
        }
        u->nchan = i + 1;
    }
    return 0;
}

/* The control socket and the data channels on consecutive ports, so that the iface address
 * announces every channel in one byte (the count after the control port) and an owner sends
 * a transfer only to a port that address names (udz_udp_chan_addr). A block whose ports are
 * taken is let go and another tried where the kernel puts the next control socket. */
static int udz_udp_open_block(udz_udp_t *u, struct in_addr ip, unsigned nchan, int rcvbuf,
                              int sndbuf, char *err, size_t errlen)
{
    unsigned attempt, i;
    int rc = -EADDRINUSE;

    for (attempt = 0; (attempt < UDZ_UDP_BLOCK_TRIES) && (rc == -EADDRINUSE); ++attempt) {
        rc = udz_udp_try_block(u, ip, nchan, rcvbuf, sndbuf, err, errlen);
        if (rc == 0) {
            return 0;
        }
        if (u->fd >= 0) {
            close(u->fd);
            u->fd = -1;
        }
        for (i = 0; i < u->nchan; ++i) {
            close(u->chan_fd[i]);
            u->chan_fd[i] = -1;
        }
        u->nchan = 0;
    }
    if (rc == -EADDRINUSE) {
        snprintf(err, errlen, "no %u free consecutive UDP ports on %s in %u tries", nchan + 1,
                 inet_ntoa(ip), UDZ_UDP_BLOCK_TRIES);
    }
    return rc;
}

int udz_udp_open(udz_udp_t *u, struct in_addr ip, unsigned nchan, int rcvbuf, int sndbuf,
                 int gro, char *err, size_t errlen)
{
    unsigned i;
    int rc;

    memset(u, 0, sizeof(*u));
    u->fd       = -1;
    u->epfd     = -1;
    u->ready.fd = -1;
    u->pend_efd = -1;
    for (i = 0; i < UDZ_MAX_CHANNELS; ++i) {
        u->chan_fd[i] = -1;
    }
    if (nchan > UDZ_MAX_CHANNELS) {
        snprintf(err, errlen, "at most %d data channels", UDZ_MAX_CHANNELS);
        return -EINVAL;
    }
    u->ip = ip;
    rc = udz_udp_open_block(u, ip, nchan, rcvbuf, sndbuf, err, errlen);
    if (rc != 0) {
        return rc;
    }
    /* without the ring (old kernel, io_uring forbidden) every poll is a receive, as before */
    (void)udz_udp_ready_open(&u->ready, u->fd);
    {
        /* UDP GSO (Linux >= 4.18): a run of equal-sized datagrams goes down the stack as one
         * packet and is cut into datagrams late (or by the NIC); probed once here */
        int zero = 0;
        u->gso = (setsockopt(u->fd, SOL_UDP, UDP_SEGMENT, &zero, sizeof(zero)) == 0);
    }
    /* UDP GRO (Linux >= 5.0): a GSO run from the peer (kept whole across veth and loopback,
     * or rebuilt by the NIC's GRO) reaches a data channel as one packet instead of being cut
     * up at the socket; udz_udp_recv_gro scatters it into the core's slots in one call */
    u->gro = gro && (nchan > 0);
    for (i = 0; u->gro && (i < nchan); ++i) {
        u->chan_gro[i] = (udz_udp_chan_set_gro(u->chan_fd[i], 1) == 0);
        u->gro         = u->chan_gro[i];
    }
    for (i = 0; gro && !u->gro && (i < nchan); ++i) {
        u->chan_gro[i] = 0;     /* all or none: the channels are interchangeable */
        (void)udz_udp_chan_set_gro(u->chan_fd[i], 0);
    }
    /* the control socket too: a message's stream packets come as one GSO run (udz_stream.c,
     * send coalescing), which the kernel would otherwise cut and queue datagram by datagram;
     * received whole into the wire's buffers and cut there (udz_udp_recv_runs) */
    if (gro) {
        u->ctl_buf = malloc((size_t)UDZ_UDP_CTL_BUFS * UDZ_UDP_CTL_STRIDE);
        u->ctl_gro = (u->ctl_buf != NULL) && (udz_udp_chan_set_gro(u->fd, 1) == 0);
        if (!u->ctl_gro) {
            free(u->ctl_buf);
            u->ctl_buf = NULL;
        }
    }
    return 0;
}

void udz_udp_close(udz_udp_t *u)
{
    unsigned i;

    if (u->ready.fd >= 0) {
        udz_udp_ready_close(&u->ready);
    }
    if (u->epfd >= 0) {
        close(u->epfd);
        u->epfd = -1;
    }
    if (u->fd >= 0) {
        close(u->fd);
        u->fd = -1;
    }
    if (u->pend_efd >= 0) {
        close(u->pend_efd);
        u->pend_efd = -1;
    }
    free(u->ctl_buf);
    u->ctl_buf = NULL;
    u->ctl_gro = 0;
    u->ctl_n   = u->ctl_i = 0;
    for (i = 0; i < UDZ_MAX_CHANNELS; ++i) {
        if (u->chan_fd[i] >= 0) {
            close(u->chan_fd[i]);
            u->chan_fd[i] = -1;
        }
    }
}

int udz_udp_send(void *wire, const udz_addr_t *dst, const udz_txmsg_t *msgs, int n)
{
    udz_udp_t *u = wire;
    struct sockaddr_in sin;
    int rc;

    to_sockaddr(dst, &sin);
    if (n == 1) {
        struct msghdr mh = {.msg_name = &sin, .msg_namelen = sizeof(sin),
                            .msg_iov = (struct iovec*)msgs[0].iov,
                            .msg_iovlen = (size_t)msgs[0].iovcnt};
        rc = (int)sendmsg(u->fd, &mh, MSG_DONTWAIT);
        if ((rc < 0) && (errno == ECONNREFUSED)) {
            /* the error belongs to an earlier datagram (IP_RECVERR): note it, send again */
            u->errq = 1;
            rc = (int)sendmsg(u->fd, &mh, MSG_DONTWAIT);
        }
        if (rc >= 0) {
            return 1;
        }
        return ((errno == EAGAIN) || (errno == ENOBUFS) || (errno == EINTR)) ? 0 : -errno;
    }
    return udz_udp_send_many(u, &sin, msgs, n);
}

/* Reports ICMP port-unreachable errors as 'unreach' records naming the dead destination. */
static int udz_udp_errqueue(udz_udp_t *u, udz_rxmsg_t *msgs, int n)
{
    char cbuf[512];
    struct sockaddr_in dst;
    struct cmsghdr *cm;
    struct sock_extended_err *ee;
    struct msghdr mh;
    int count = 0;

    while (count < n) {
        memset(&mh, 0, sizeof(mh));
        mh.msg_name       = &dst;
        mh.msg_namelen    = sizeof(dst);
        mh.msg_control    = cbuf;
        mh.msg_controllen = sizeof(cbuf);
        if (recvmsg(u->fd, &mh, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) {
            break;
        }
        for (cm = CMSG_FIRSTHDR(&mh); cm != NULL; cm = CMSG_NXTHDR(&mh, cm)) {
            if ((cm->cmsg_level != IPPROTO_IP) || (cm->cmsg_type != IP_RECVERR)) {
                continue;
            }
            ee = (struct sock_extended_err*)CMSG_DATA(cm);
            if ((ee->ee_origin == SO_EE_ORIGIN_ICMP) && (ee->ee_errno == ECONNREFUSED) &&
                (mh.msg_namelen >= sizeof(dst)) && (dst.sin_family == AF_INET)) {
                msgs[count].len     = 0;
                msgs[count].trunc   = 0;
                msgs[count].unreach = 1;
                udz_udp_addr_make(dst.sin_addr, dst.sin_port, &msgs[count].src);
                ++count;
            }
        }
    }
    if (count == n) {
        u->errq = 1;    /* maybe more */
    }
    return count;
}

long udz_udp_ctl_seg(const struct msghdr *mh, size_t rc)
{
    const struct cmsghdr *cm;
    int gso = 0, have = 0;

    if (mh->msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
        return -1;
    }
    for (cm = CMSG_FIRSTHDR((struct msghdr*)mh); cm != NULL;
         cm = CMSG_NXTHDR((struct msghdr*)mh, (struct cmsghdr*)cm)) {
        if ((cm->cmsg_level == SOL_UDP) && (cm->cmsg_type == UDP_GRO)) {
            if (cm->cmsg_len < CMSG_LEN(sizeof(int))) {
                return -1;
            }
            memcpy(&gso, CMSG_DATA(cm), sizeof(gso));
            have = 1;
        }
    }
    if (!have) {
        return 0;
    }
    if ((gso <= 0) || ((size_t)gso > rc)) {
        return -1;
    }
    return ((size_t)gso == rc) ? 0 : gso;
}

/* Lends a datagram of the wire's buffer to a slot (udz_wire.h recv): iov[0] points at it whole,
 * and the slot's own areas stay untouched. A datagram longer than the slot's areas is reported
 * truncated at their length, as a scatter into them would have been (the core drops it). */
static void udz_udp_ctl_put(udz_rxmsg_t *m, const unsigned char *p, size_t len,
                            const udz_addr_t *src)
{
    size_t room = m->iov[0].iov_len + m->iov[1].iov_len;

    m->iov[0].iov_base = (void*)p;
    m->iov[0].iov_len  = (len < room) ? len : room;
    m->len     = m->iov[0].iov_len;
    m->trunc   = (len > room);
    m->unreach = 0;
    m->src     = *src;
}

/* Hands what the wire holds to msgs[j..n): a run datagram by datagram. Returns the new j. */
static int udz_udp_ctl_drain(udz_udp_t *u, udz_rxmsg_t *msgs, int j, int n)
{
    const unsigned char *buf;
    size_t len, seg, d;

    while ((j < n) && (u->ctl_i < u->ctl_n)) {
        buf = u->ctl_buf + (size_t)u->ctl_i * UDZ_UDP_CTL_STRIDE;
        len = u->ctl_len[u->ctl_i];
        seg = u->ctl_seg[u->ctl_i];
        if (u->ctl_off < len) {
            d = len - u->ctl_off;
            if ((seg > 0) && (d > seg)) {
                d = seg;
            }
            udz_udp_ctl_put(&msgs[j++], buf + u->ctl_off, d, &u->ctl_src[u->ctl_i]);
            u->ctl_off += d;
        }
        if (u->ctl_off >= len) {
            u->ctl_i++;
            u->ctl_off = 0;
        }
    }
    return j;
}

/* The event fd's extra readiness follows the datagrams held in the wire (only while the glue
 * sleeps on it: made with the epoll set). */
static void udz_udp_pend_signal(udz_udp_t *u)
{
    int pend = udz_udp_ctl_pending(u);
    uint64_t v = 1;

    if ((u->pend_efd < 0) || (pend == u->pend_sig)) {
        return;
    }
    if (pend) {
        (void)!write(u->pend_efd, &v, sizeof(v));
    } else {
        (void)!read(u->pend_efd, &v, sizeof(v));
    }
    u->pend_sig = pend;
}

/* One recvmmsg of up to k datagrams on the control socket, with the idle and readiness
 * bookkeeping. 0: *rc datagrams came (0..k); 1: *rc is what recv returns (an ICMP error
 * reported into msgs, 0 for nothing now, or -errno). */
static int udz_udp_ctl_recvmmsg(udz_udp_t *u, struct mmsghdr *mm, int k, udz_rxmsg_t *msgs,
                                int n, int *rc)
{
    if (u->counters != NULL) {
        u->counters->ctl_recv_calls++;
    }
    *rc     = recvmmsg(u->fd, mm, (unsigned)k, MSG_DONTWAIT, NULL);
    u->more = (*rc == k);
    if (*rc > 0) {
        u->idle = 0;
    } else if (u->idle < UDZ_READY_IDLE_POLLS) {
        u->idle++;
    }
    if (*rc >= 0) {
        return 0;
    }
    *rc = (errno == ECONNREFUSED) ? udz_udp_errqueue(u, msgs, n) :
          ((errno == EAGAIN) || (errno == EINTR)) ? 0 : -errno;
    return 1;
}

/* The control socket with UDP_GRO: a recvmmsg into the wire's buffers (a coalesced run whole
 * in one, a small datagram alone in one), cut into the core's slots, each lent the datagram in
 * place (no copy: it stays valid until the next call, which receives nothing new until what
 * the buffers hold is handed out); what does not fit stays for the next call. */
static int udz_udp_recv_runs(udz_udp_t *u, udz_rxmsg_t *msgs, int n)
{
    int rc, i, k, j;
    long seg;

    j = udz_udp_ctl_drain(u, msgs, 0, n);
    if ((j > 0) || udz_udp_ctl_pending(u)) {
        u->idle = 0;
        udz_udp_pend_signal(u);
        return j;
    }
    if (u->errq) {
        u->errq = 0;
        rc = udz_udp_errqueue(u, msgs, n);
        if (rc > 0) {
            return rc;
        }
    }
    k = (n < UDZ_UDP_CTL_BUFS) ? n : UDZ_UDP_CTL_BUFS;
    for (i = 0; i < k; ++i) {
        memset(&u->ctl_mm[i], 0, sizeof(u->ctl_mm[i]));
        u->ctl_iov[i].iov_base = u->ctl_buf + (size_t)i * UDZ_UDP_CTL_STRIDE;
        u->ctl_iov[i].iov_len  = UDZ_UDP_RUN_BYTES;
        u->ctl_mm[i].msg_hdr.msg_name       = &u->ctl_names[i];
        u->ctl_mm[i].msg_hdr.msg_namelen    = sizeof(u->ctl_names[i]);
        u->ctl_mm[i].msg_hdr.msg_iov        = &u->ctl_iov[i];
        u->ctl_mm[i].msg_hdr.msg_iovlen     = 1;
        u->ctl_mm[i].msg_hdr.msg_control    = u->ctl_cmsg[i];
        u->ctl_mm[i].msg_hdr.msg_controllen = sizeof(u->ctl_cmsg[i]);
    }
    if (udz_udp_ctl_recvmmsg(u, u->ctl_mm, k, msgs, n, &rc) != 0) {
        return rc;
    }
    for (i = 0; i < rc; ++i) {
        seg = udz_udp_ctl_seg(&u->ctl_mm[i].msg_hdr, u->ctl_mm[i].msg_len);
        if (seg < 0) {
            u->ctl_dropped++;
            u->ctl_len[i] = 0;
            u->ctl_seg[i] = 0;
        } else {
            u->ctl_len[i] = u->ctl_mm[i].msg_len;
            u->ctl_seg[i] = (size_t)seg;
        }
        udz_udp_src_addr(&u->ctl_names[i], u->ctl_mm[i].msg_hdr.msg_namelen, &u->ctl_src[i]);
    }
    u->ctl_n   = rc;
    u->ctl_i   = 0;
    u->ctl_off = 0;
    j = udz_udp_ctl_drain(u, msgs, 0, n);
    udz_udp_pend_signal(u);
    return j;
}

/* The control socket: datagrams, and the ICMP errors that name dead peers. An idle socket is
 * asked through its readiness ring first (udz_udp_ready.c), which costs no system call. */
static int udz_udp_recv(void *wire, udz_rxmsg_t *msgs, int n)
{
    udz_udp_t *u = wire;
    int rc;

    if ((u->idle >= UDZ_READY_IDLE_POLLS) && !u->more && !u->errq && (u->ready.fd >= 0) &&
        !udz_udp_ctl_pending(u)) {
        if (!u->ready.armed) {
            (void)udz_udp_ready_arm(&u->ready);   /* an idle spell begins; receive once more */
        } else if (!udz_udp_ready_wakeup(&u->ready)) {
            if (u->counters != NULL) {
                u->counters->idle_polls_free++;
            }
            return 0;
        }
    }
    if (u->ctl_gro) {
        return udz_udp_recv_runs(u, msgs, n);
    }
    if (n > UDZ_UDP_BATCH) {
        n = UDZ_UDP_BATCH;
    }
    udz_udp_mm_prep(u, msgs, n);
    if (u->errq) {
        u->errq = 0;
        rc = udz_udp_errqueue(u, msgs, n);
        if (rc > 0) {
            return rc;
        }
    }
    if (udz_udp_ctl_recvmmsg(u, u->mm, n, msgs, n, &rc) != 0) {
        return rc;
    }
    udz_udp_mm_done(u, msgs, rc);
    return rc;
}

static int udz_udp_rx_idle(void *wire)
{
    const udz_udp_t *u = wire;

    return (u->idle >= UDZ_READY_IDLE_POLLS) && !u->more && !u->errq && (u->ready.fd >= 0) &&
           !udz_udp_ctl_pending(u) && udz_udp_ready_quiet(&u->ready);
}

/* ---- the interface's MTU ---- */

unsigned udz_udp_mtu(const char *ifname)
{
    struct ifreq ifr;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    unsigned mtu = 0;

    if (fd < 0) {
        return 0;
    }
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
    if (ioctl(fd, SIOCGIFMTU, &ifr) == 0) {
        mtu = (unsigned)ifr.ifr_mtu;
    }
    close(fd);
    return mtu;
}

/* ---- devices ---- */

/* The first IPv4 address of an interface that is up and running (as UCX's tcp finds it). */
static int udz_udp_if_addr(const char *ifname, struct in_addr *ip)
{
    struct ifaddrs *ifaddrs, *ifa;
    int rc = -ENODEV;

    if (getifaddrs(&ifaddrs) != 0) {
        return -errno;
    }
    for (ifa = ifaddrs; ifa != NULL; ifa = ifa->ifa_next) {
        if ((strcmp(ifname, ifa->ifa_name) == 0) && (ifa->ifa_addr != NULL) &&
            (ifa->ifa_addr->sa_family == AF_INET) && (ifa->ifa_flags & IFF_UP) &&
            (ifa->ifa_flags & IFF_RUNNING)) {
            *ip = ((const struct sockaddr_in*)ifa->ifa_addr)->sin_addr;
            rc  = 0;
            break;
        }
    }
    freeifaddrs(ifaddrs);
    return rc;
}

/* Every network interface that is up and has an IPv4 address (as UCX's tcp). */
static int udz_udp_query_devices(int (*found)(void *arg, const char *dev), void *arg)
{
    struct dirent *entry;
    struct in_addr ip;
    DIR *dir = opendir("/sys/class/net");
    int rc = 0;

    if (dir == NULL) {
        return -errno;
    }
    while ((rc == 0) && ((entry = readdir(dir)) != NULL)) {
        if ((entry->d_type == DT_LNK) && (udz_udp_if_addr(entry->d_name, &ip) == 0)) {
            rc = found(arg, entry->d_name);
        }
    }
    closedir(dir);
    return rc;
}

static size_t udz_udp_dev_mtu(const char *dev)
{
    unsigned mtu = udz_udp_mtu(dev);

    return (mtu > UDZ_UDP_HDRS) ? mtu - UDZ_UDP_HDRS : 0;
}

/* ---- life cycle ---- */

static int udz_udp_wire_open(const char *dev, const udz_wire_params_t *params, void **wire_p,
                             char *err, size_t errlen)
{
    struct in_addr ip;
    udz_udp_t *u;
    int rc;

    if (udz_udp_if_addr(dev, &ip) != 0) {
        snprintf(err, errlen, "device %s has no IPv4 address", dev);
        return -ENODEV;
    }
    u = calloc(1, sizeof(*u));
    if (u == NULL) {
        snprintf(err, errlen, "no memory for the UDP wire");
        return -ENOMEM;
    }
    rc = udz_udp_open(u, ip, params->channels, (int)params->rx_buffer, (int)params->tx_buffer,
                      params->coalesce, err, errlen);
    if (rc != 0) {
        udz_udp_close(u);
        free(u);
        return rc;
    }
    u->counters = params->counters;
    u->dev_mtu  = udz_udp_mtu(dev);
    *wire_p = u;
    return 0;
}

static void udz_udp_wire_close(void *wire)
{
    udz_udp_close(wire);
    free(wire);
}

static int udz_udp_is_loopback(struct in_addr ip)
{
    return (ntohl(ip.s_addr) >> 24) == 127;
}

static void udz_udp_query(void *wire, udz_wire_attr_t *attr)
{
    udz_udp_t *u = wire;
    char ip[INET_ADDRSTRLEN];

    attr->rx_buffer = (size_t)u->rcvbuf;
    attr->loopback  = udz_udp_is_loopback(u->ip);
    snprintf(attr->desc, sizeof(attr->desc), "%s:%u, rcvbuf %d, gso %d gro %d/%d, idle ring %s",
             inet_ntop(AF_INET, &u->ip, ip, sizeof(ip)), ntohs(u->port), u->rcvbuf, u->gso,
             u->gro, u->ctl_gro, (u->ready.fd >= 0) ? "io_uring" : "none");
}

/* ---- addresses: the device's IPv4 address, the control socket's port ---- */

static void udz_udp_dev_addr_pack(void *wire, void *dev_addr)
{
    memcpy(dev_addr, &((udz_udp_t*)wire)->ip, sizeof(struct in_addr));
}

/* iface address: the control port and the count of data channels, which are on the ports
 * right after it (udz_udp_open_block) */
static void udz_udp_iface_addr_pack(void *wire, void *iface_addr)
{
    const udz_udp_t *u = wire;

    memcpy(iface_addr, &u->port, sizeof(uint16_t));
    ((uint8_t*)iface_addr)[2] = (uint8_t)u->nchan;
}

static void udz_udp_addr_unpack(const void *dev_addr, const void *iface_addr, udz_addr_t *out,
                                udz_chans_t *chans)
{
    struct in_addr ip;
    uint16_t port;
    uint8_t n = ((const uint8_t*)iface_addr)[2];

    memcpy(&ip, dev_addr, sizeof(ip));
    memcpy(&port, iface_addr, sizeof(port));
    udz_udp_addr_make(ip, port, out);
    memset(chans, 0, sizeof(*chans));
    /* more than a wire opens, or past the last port: announces nothing we would send to */
    if ((n <= UDZ_MAX_CHANNELS) && ((unsigned)ntohs(port) + n <= 65535u)) {
        chans->b[0] = n;
    }
}

/* an address a datagram can be sent to one peer at: not 0.0.0.0/8 ("this network"),
 * multicast (224.0.0.0/4) or reserved and broadcast (240.0.0.0/4) */
static int udz_udp_is_unicast(struct in_addr ip)
{
    uint32_t a = ntohl(ip.s_addr);

    return ((a >> 24) != 0) && ((a >> 28) < 0xe);
}

static int udz_udp_is_reachable(void *wire, const void *dev_addr, int same_host)
{
    udz_udp_t *u = wire;
    struct in_addr remote;

    memcpy(&remote, dev_addr, sizeof(remote));
    if (!udz_udp_is_unicast(remote)) {
        /* a corrupt or foreign address (UCX 1.22's test_uct_iface.is_reachable feeds random
         * ones): no peer there */
        return 0;
    }
    if (udz_udp_is_loopback(u->ip) || udz_udp_is_loopback(remote)) {
        /* a loopback address means "this host, this network namespace" */
        return udz_udp_is_loopback(u->ip) && udz_udp_is_loopback(remote) && same_host;
    }
    /* a peer behind a route of smaller datagrams is another device's (udz_udp_route.c) */
    return udz_udp_route_fits(u, remote) != 0;
}

/* One descriptor for the glue to sleep on: an epoll set of the control socket and every data
 * channel, readable while any of them holds a datagram or an ICMP error. Made once, at the
 * glue's first ask. */
static int udz_udp_event_fd(void *wire)
{
    udz_udp_t *u = wire;
    struct epoll_event ev;
    unsigned i;
    int err;

    if (u->epfd >= 0) {
        return u->epfd;
    }
    u->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (u->epfd < 0) {
        err = -errno;
        u->epfd = -1;
        return err;
    }
    for (i = 0; i <= u->nchan; ++i) {
        memset(&ev, 0, sizeof(ev));
        ev.events  = EPOLLIN;
        ev.data.fd = (i == 0) ? u->fd : u->chan_fd[i - 1];
        if (epoll_ctl(u->epfd, EPOLL_CTL_ADD, ev.data.fd, &ev) != 0) {
            err = -errno;
            close(u->epfd);
            u->epfd = -1;
            return err;
        }
    }
    if (u->ctl_gro) {
        /* readable while datagrams of a run wait in the wire (udz_udp_pend_signal) */
        u->pend_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        memset(&ev, 0, sizeof(ev));
        ev.events  = EPOLLIN;
        ev.data.fd = u->pend_efd;
        if ((u->pend_efd < 0) || (epoll_ctl(u->epfd, EPOLL_CTL_ADD, u->pend_efd, &ev) != 0)) {
            err = -errno;
            if (u->pend_efd >= 0) {
                close(u->pend_efd);
                u->pend_efd = -1;
            }
            close(u->epfd);
            u->epfd = -1;
            return err;
        }
        u->pend_sig = 0;
        udz_udp_pend_signal(u);
    }
    return u->epfd;
}

const udz_wire_ops_t udz_udp_wire = {
    .name            = "udp",
    .max_dgram       = UDZ_UDP_MAX_DGRAM,
    .run_bytes       = UDZ_UDP_RUN_BYTES,
    .run_dgrams      = UDZ_UDP_RUN_DGRAMS,
    .dev_mtu         = udz_udp_dev_mtu,
    .query_devices   = udz_udp_query_devices,
    .open            = udz_udp_wire_open,
    .close           = udz_udp_wire_close,
    .query           = udz_udp_query,
    .dev_addr_len    = sizeof(struct in_addr),
    .iface_addr_len  = sizeof(uint16_t) + 1,
    .dev_addr_pack   = udz_udp_dev_addr_pack,
    .iface_addr_pack = udz_udp_iface_addr_pack,
    .addr_unpack     = udz_udp_addr_unpack,
    .is_reachable    = udz_udp_is_reachable,
    .send            = udz_udp_send,
    .recv            = udz_udp_recv,
    .rx_idle         = udz_udp_rx_idle,
    .chan_id         = udz_udp_chan_id,
    .chan_addr       = udz_udp_chan_addr,
    .chan_recv       = udz_udp_chan_recv,
    .chan_send       = udz_udp_send,
    .event_fd        = udz_udp_event_fd,
    .tx_run_dgrams   = UDZ_UDP_RUN_DGRAMS,
    .tx_run_bytes    = UDZ_UDP_GSO_BYTES,
    .path_mtu        = udz_udp_path_mtu,
    /* ucx_perftest -t get_bw -D zcopy -O 1 over lo: 21-23 us per get plus 5.8 GB/s (27 us at
     * 32 KiB, 46 at 128 KiB, 200-209 at 1 MiB; chunks of 16, 32 or 64 KiB alike), where the
     * iface's latency, the request's and the overhead give 6 */
    .get_setup       = 16e-6,
    /* windowed MPI bandwidth at 1-4 MiB on one lane over lo, both MPIs on UCX 1.22: eager
     * 0.65-0.75x rendezvous (UCT: am_bw of 16 KiB bcopy 1.6-2.3 GB/s, get_bw of 1 MiB
     * 3.2-4.9) */
    .stream_bw_share = 0.7,
};
