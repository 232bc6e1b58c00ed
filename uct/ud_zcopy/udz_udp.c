/*
 * ud_zcopy UDP wire (see udz_udp.h).
 */
#include "udz_udp.h"

#include <errno.h>
#include <arpa/inet.h>
#include <linux/errqueue.h>
#include <netinet/udp.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

void udz_udp_addr_make(struct in_addr ip, uint16_t port_be, udz_addr_t *out)
{
    memset(out, 0, sizeof(*out));
    memcpy(out->b, &ip, 4);
    memcpy(out->b + 4, &port_be, 2);
}

void udz_udp_addr_split(const udz_addr_t *a, struct in_addr *ip, uint16_t *port_be)
{
    memcpy(ip, a->b, 4);
    memcpy(port_be, a->b + 4, 2);
}

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

/* UDP_GRO on or off for one data channel; 0 when the kernel took it. */
static int chan_set_gro(int fd, int on)
{
    return setsockopt(fd, SOL_UDP, UDP_GRO, &on, sizeof(on));
}

/* The sender's control address as the core names it (zeros when not an IPv4 sender). */
static void src_addr(const struct sockaddr_in *name, socklen_t namelen, udz_addr_t *out)
{
    if ((namelen == sizeof(*name)) && (name->sin_family == AF_INET)) {
        udz_udp_addr_make(name->sin_addr, name->sin_port, out);
    } else {
        memset(out, 0, sizeof(*out));
    }
}

static int open_one(struct in_addr ip, int rcvbuf, int sndbuf, int *fd_p, uint16_t *port_p,
                    int *rcv_got, int *snd_got, char *err, size_t errlen)
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
    if ((bind(fd, (struct sockaddr*)&sin, sizeof(sin)) != 0) ||
        (getsockname(fd, (struct sockaddr*)&sin, &len) != 0)) {
        e = errno;
        snprintf(err, errlen, "bind(%s): %s", inet_ntoa(ip), strerror(e));
        close(fd);
        return -e;
    }
    if (sndbuf > 0) {
        /* the sending socket learns of ICMP port unreachable: nobody listens there any more,
         * a peer that died (read from the error queue in udz_udp_recv) */
        int one = 1;
        (void)setsockopt(fd, IPPROTO_IP, IP_RECVERR, &one, sizeof(one));
    }
    *rcv_got = set_buf(fd, SO_RCVBUFFORCE, SO_RCVBUF, rcvbuf);
    *snd_got = set_buf(fd, SO_SNDBUFFORCE, SO_SNDBUF, sndbuf);
    *fd_p    = fd;
    *port_p  = sin.sin_port;
    return 0;
}

int udz_udp_open(udz_udp_t *u, struct in_addr ip, unsigned nchan, int rcvbuf, int sndbuf,
                 int gro, char *err, size_t errlen)
{
    unsigned i;
    int rc, r, s;

    memset(u, 0, sizeof(*u));
    u->fd = -1;
    for (i = 0; i < UDZ_MAX_CHANNELS; ++i) {
        u->chan_fd[i] = -1;
    }
    if (nchan > UDZ_MAX_CHANNELS) {
        snprintf(err, errlen, "at most %d data channels", UDZ_MAX_CHANNELS);
        return -EINVAL;
    }
    u->ip = ip;
    rc = open_one(ip, rcvbuf, sndbuf, &u->fd, &u->port, &u->rcvbuf, &u->sndbuf, err, errlen);
    if (rc != 0) {
        return rc;
    }
    {
        /* UDP GSO (Linux >= 4.18): a run of equal-sized datagrams goes down the stack as one
         * packet and is cut into datagrams late (or by the NIC); probed once here */
        int zero = 0;
        u->gso = (setsockopt(u->fd, SOL_UDP, UDP_SEGMENT, &zero, sizeof(zero)) == 0);
    }
    for (i = 0; i < nchan; ++i) {
        /* data channels only receive: their buffer holds a transfer's window */
        rc = open_one(ip, rcvbuf, 0, &u->chan_fd[i], &u->chan_port[i], &r, &s, err, errlen);
        if (rc != 0) {
            udz_udp_close(u);
            return rc;
        }
        u->nchan = i + 1;
    }
    /* UDP GRO (Linux >= 5.0): a GSO run from the peer (kept whole across veth and loopback,
     * or rebuilt by the NIC's GRO) reaches a data channel as one packet instead of being cut
     * up at the socket; udz_udp_recv_gro scatters it into the core's slots in one call */
    u->gro = gro && (nchan > 0);
    for (i = 0; u->gro && (i < nchan); ++i) {
        u->chan_gro[i] = (chan_set_gro(u->chan_fd[i], 1) == 0);
        u->gro         = u->chan_gro[i];
    }
    for (i = 0; gro && !u->gro && (i < nchan); ++i) {
        u->chan_gro[i] = 0;     /* all or none: the channels are interchangeable */
        (void)chan_set_gro(u->chan_fd[i], 0);
    }
    return 0;
}

void udz_udp_close(udz_udp_t *u)
{
    unsigned i;

    if (u->fd >= 0) {
        close(u->fd);
        u->fd = -1;
    }
    for (i = 0; i < UDZ_MAX_CHANNELS; ++i) {
        if (u->chan_fd[i] >= 0) {
            close(u->chan_fd[i]);
            u->chan_fd[i] = -1;
        }
    }
}

static size_t txmsg_len(const udz_txmsg_t *m)
{
    size_t len = 0;
    int i;

    for (i = 0; i < m->iovcnt; ++i) {
        len += m->iov[i].iov_len;
    }
    return len;
}

/* Groups runs of equal-sized datagrams (the last of a run may be shorter) into UDP GSO sends:
 * one sendmsg, one trip down the stack, per up to 64 datagrams or 64 KiB. Returns datagrams
 * sent, or -EIO when the kernel refuses GSO on this path. */
static int udz_udp_send_gso(udz_udp_t *u, struct sockaddr_in *sin, const udz_txmsg_t *msgs,
                            int n)
{
    int i = 0, g = 0, niov = 0, j, rc, sent;
    size_t seg, len, bytes;
    struct cmsghdr *cm;

    while ((i < n) && (g < UDZ_UDP_BATCH)) {
        int start = i, first_iov = niov;

        seg   = txmsg_len(&msgs[i]);
        bytes = 0;
        while ((i < n) && (i - start < 64)) {
            len = txmsg_len(&msgs[i]);
            if ((niov + msgs[i].iovcnt > UDZ_UDP_BATCH * (1 + UDZ_MAX_IOV)) ||
                ((i > start) && ((len > seg) || (bytes + len > 65000)))) {
                break;  /* the first datagram of a run always goes, whatever its size */
            }
            for (j = 0; j < msgs[i].iovcnt; ++j) {
                u->gso_iov[niov++] = msgs[i].iov[j];
            }
            bytes += len;
            ++i;
            if (len < seg) {
                break;  /* a shorter one ends the run */
            }
        }
        if (i == start) {
            break;      /* iovec space exhausted */
        }
        memset(&u->mm[g], 0, sizeof(u->mm[g]));
        u->mm[g].msg_hdr.msg_name    = sin;
        u->mm[g].msg_hdr.msg_namelen = sizeof(*sin);
        u->mm[g].msg_hdr.msg_iov     = &u->gso_iov[first_iov];
        u->mm[g].msg_hdr.msg_iovlen  = (size_t)(niov - first_iov);
        if (i - start > 1) {
            u->mm[g].msg_hdr.msg_control    = u->gso_cmsg[g];
            u->mm[g].msg_hdr.msg_controllen = CMSG_SPACE(sizeof(uint16_t));
            cm = CMSG_FIRSTHDR(&u->mm[g].msg_hdr);
            cm->cmsg_level = SOL_UDP;
            cm->cmsg_type  = UDP_SEGMENT;
            cm->cmsg_len   = CMSG_LEN(sizeof(uint16_t));
            *(uint16_t*)CMSG_DATA(cm) = (uint16_t)seg;
        }
        u->gso_count[g++] = i - start;
    }
    rc = sendmmsg(u->fd, u->mm, (unsigned)g, MSG_DONTWAIT);
    if ((rc < 0) && (errno == ECONNREFUSED)) {
        u->errq = 1;
        rc = sendmmsg(u->fd, u->mm, (unsigned)g, MSG_DONTWAIT);
    }
    if (rc < 0) {
        if ((errno == EIO) || (errno == EINVAL) || (errno == EOPNOTSUPP)) {
            return -EIO;
        }
        return ((errno == EAGAIN) || (errno == ENOBUFS) || (errno == EINTR)) ? 0 : -errno;
    }
    for (sent = 0, j = 0; j < rc; ++j) {
        sent += u->gso_count[j];
    }
    return sent;
}

static int udz_udp_send(void *wire, const udz_addr_t *dst, const udz_txmsg_t *msgs, int n)
{
    udz_udp_t *u = wire;
    struct sockaddr_in sin;
    int i, rc;

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
    if (n > UDZ_UDP_BATCH) {
        n = UDZ_UDP_BATCH;
    }
    if (u->gso) {
        rc = udz_udp_send_gso(u, &sin, msgs, n);
        if (rc != -EIO) {
            return rc;
        }
        u->gso = 0;     /* refused by this path: plain datagrams from now on */
    }
    for (i = 0; i < n; ++i) {
        memset(&u->mm[i], 0, sizeof(u->mm[i]));
        u->mm[i].msg_hdr.msg_name    = &sin;
        u->mm[i].msg_hdr.msg_namelen = sizeof(sin);
        u->mm[i].msg_hdr.msg_iov     = (struct iovec*)msgs[i].iov;
        u->mm[i].msg_hdr.msg_iovlen  = (size_t)msgs[i].iovcnt;
    }
    rc = sendmmsg(u->fd, u->mm, (unsigned)n, MSG_DONTWAIT);
    if ((rc < 0) && (errno == ECONNREFUSED)) {
        u->errq = 1;
        rc = sendmmsg(u->fd, u->mm, (unsigned)n, MSG_DONTWAIT);
    }
    if (rc >= 0) {
        return rc;
    }
    return ((errno == EAGAIN) || (errno == ENOBUFS) || (errno == EINTR)) ? 0 : -errno;
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

/* A data channel with UDP_GRO: one recvmsg per coalesced run, its iovec the slots of msgs[j..n)
 * back to back ([header, payload] pairs). A run of equal datagrams, each exactly one slot pair
 * long (the core's slots are header + full chunk, and the owner cuts at the chunk size the
 * requester asked for), so the kernel's linear copy lands datagram i in slot pair i: the
 * header/payload split of recvmmsg, without a call or a socket-buffer hop per datagram.
 * A run whose segment size is not one slot pair (a stale transfer, a foreign sender) has
 * been scattered across slot boundaries: its first datagram is reported as it is (its header
 * sits in place, so the core can still tell a stale sender to stop), the rest as one
 * truncated datagram that the core drops and counts. Only slots of missing chunks and
 * scratch were written. */
static int udz_udp_recv_gro(udz_udp_t *u, int fd, udz_rxmsg_t *msgs, int n, int *runs)
{
    struct sockaddr_in name;
    struct cmsghdr *cm;
    struct msghdr mh;
    udz_addr_t src;
    size_t seg, pair, left;
    int i, j = 0, niov, aligned, misaligned, gso;
    ssize_t rc;

    while (j < n) {
        niov    = 0;
        aligned = 1;
        pair    = msgs[j].iov[0].iov_len + msgs[j].iov[1].iov_len;
        if ((j > 0) && ((size_t)(n - j) * pair < 65536) && (n - j < 64)) {
            break;  /* what is left might not hold a whole run: its tail would be cut off */
        }
        for (i = j; (i < n) && (niov + 2 <= (int)(sizeof(u->gro_iov) / sizeof(u->gro_iov[0])));
             ++i) {
            u->gro_iov[niov++] = msgs[i].iov[0];
            if (msgs[i].iov[1].iov_len > 0) {
                u->gro_iov[niov++] = msgs[i].iov[1];
            }
            aligned &= (msgs[i].iov[0].iov_len + msgs[i].iov[1].iov_len == pair);
        }
        memset(&mh, 0, sizeof(mh));
        mh.msg_name       = &name;
        mh.msg_namelen    = sizeof(name);
        mh.msg_iov        = u->gro_iov;
        mh.msg_iovlen     = (size_t)niov;
        mh.msg_control    = u->gro_cmsg;
        mh.msg_controllen = sizeof(u->gro_cmsg);
        rc = recvmsg(fd, &mh, MSG_DONTWAIT);
        if (rc < 0) {
            if (j > 0) {
                break;
            }
            return ((errno == EAGAIN) || (errno == EINTR)) ? 0 : -errno;
        }
        gso = 0;
        for (cm = CMSG_FIRSTHDR(&mh); cm != NULL; cm = CMSG_NXTHDR(&mh, cm)) {
            if ((cm->cmsg_level == SOL_UDP) && (cm->cmsg_type == UDP_GRO) &&
                (cm->cmsg_len >= CMSG_LEN(sizeof(int)))) {
                memcpy(&gso, CMSG_DATA(cm), sizeof(gso));
            }
        }
        seg        = (gso > 0) ? (size_t)gso : 0;
        *runs     += (seg > 0) && ((size_t)rc > seg);
        left       = (size_t)rc;
        misaligned = 0;     /* the first datagram's header is in place whatever the size */
        src_addr(&name, mh.msg_namelen, &src);  /* one sender for the whole run */
        do {
            msgs[j].unreach = 0;
            msgs[j].src     = src;
            if (misaligned) {
                msgs[j].len   = left;       /* the rest of the run, in pieces: dropped */
                msgs[j].trunc = 1;
                left = 0;
            } else if ((seg == 0) || (left <= seg)) {
                /* one datagram (or the run's last, shorter one) */
                msgs[j].len   = left;
                msgs[j].trunc = (seg == 0) && !!(mh.msg_flags & MSG_TRUNC);
                left = 0;
            } else {
                misaligned    = !aligned || (seg != pair);
                msgs[j].len   = seg;
                msgs[j].trunc = 0;
                left -= seg;
            }
            ++j;
        } while ((left > 0) && (j < n));
        /* the receive area held a whole run (the core offers zbatch slots, and a run is received
         * only into room for 64 datagrams or 64 KiB); should a longer one come, its tail was
         * cut by the kernel (MSG_TRUNC) and is lost like a dropped datagram */
    }
    return j;
}

static int udz_udp_recv(void *wire, int chan, udz_rxmsg_t *msgs, int n)
{
    udz_udp_t *u = wire;
    int fd = (chan == 0) ? u->fd : u->chan_fd[chan - 1];
    int i, rc;

    if ((chan > 0) && u->gro && u->chan_gro[chan - 1]) {
        int runs = 0, c = chan - 1;

        rc = udz_udp_recv_gro(u, fd, msgs, (n > 64) ? 64 : n, &runs);
        if (runs > 0) {
            u->chan_count[c] = 0;
        } else if ((rc > 0) && ((u->chan_count[c] += (uint32_t)rc) >= UDZ_UDP_GRO_OFF)) {
            /* nothing coalesces on this path: one call per batch beats one per datagram.
             * (A run queued before the switch would be cut by recvmmsg: a rare loss, which
             * the transfer repairs.) */
            (void)chan_set_gro(fd, 0);
            u->chan_gro[c]   = 0;
            u->chan_count[c] = 0;
        }
        return rc;
    }
    if (n > UDZ_UDP_BATCH) {
        n = UDZ_UDP_BATCH;
    }
    for (i = 0; i < n; ++i) {
        memset(&u->mm[i], 0, sizeof(u->mm[i]));
        u->mm[i].msg_hdr.msg_name    = &u->names[i];
        u->mm[i].msg_hdr.msg_namelen = sizeof(u->names[i]);
        u->mm[i].msg_hdr.msg_iov     = msgs[i].iov;
        u->mm[i].msg_hdr.msg_iovlen  = (msgs[i].iov[1].iov_len > 0) ? 2 : 1;
    }
    if ((chan == 0) && u->errq) {
        u->errq = 0;
        rc = udz_udp_errqueue(u, msgs, n);
        if (rc > 0) {
            return rc;
        }
    }
    rc = recvmmsg(fd, u->mm, (unsigned)n, MSG_DONTWAIT, NULL);
    if (rc < 0) {
        if ((errno == ECONNREFUSED) && (chan == 0)) {
            return udz_udp_errqueue(u, msgs, n);
        }
        return ((errno == EAGAIN) || (errno == EINTR)) ? 0 : -errno;
    }
    if ((chan > 0) && u->gro && ((u->chan_count[chan - 1] += (uint32_t)rc) >= UDZ_UDP_GRO_PROBE)) {
        /* try runs again: the path (or the peer's GSO) may have changed */
        u->chan_gro[chan - 1]   = (chan_set_gro(fd, 1) == 0);
        u->chan_count[chan - 1] = 0;
    }
    for (i = 0; i < rc; ++i) {
        msgs[i].unreach = 0;
        msgs[i].len   = u->mm[i].msg_len;
        msgs[i].trunc = !!(u->mm[i].msg_hdr.msg_flags & MSG_TRUNC);
        src_addr(&u->names[i], u->mm[i].msg_hdr.msg_namelen, &msgs[i].src);
    }
    return rc;
}

static uint32_t udz_udp_chan_id(void *wire, int chan)
{
    udz_udp_t *u = wire;

    return u->chan_port[chan - 1];
}

static void udz_udp_chan_addr(void *wire __attribute__((unused)), const udz_addr_t *ctrl,
                              uint32_t chan_id,
                              udz_addr_t *out)
{
    struct in_addr ip;
    uint16_t port;

    udz_udp_addr_split(ctrl, &ip, &port);
    udz_udp_addr_make(ip, (uint16_t)chan_id, out);
}

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

const udz_wire_ops_t udz_udp_ops = {
    .send      = udz_udp_send,
    .recv      = udz_udp_recv,
    .chan_id   = udz_udp_chan_id,
    .chan_addr = udz_udp_chan_addr,
};
