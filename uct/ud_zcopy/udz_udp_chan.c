/*
 * ud_zcopy UDP wire, the data channels (see udz_udp.h): runs of equal datagrams sent as one
 * UDP GSO send, coalesced runs received with UDP GRO in one recvmsg scattered into the core's
 * [header, chunk] slot pairs, and recvmmsg on a path where nothing coalesces.
 */
#include "udz_udp.h"

#include <errno.h>
#include <netinet/udp.h>
#include <string.h>

int udz_udp_chan_set_gro(int fd, int on)
{
    return setsockopt(fd, SOL_UDP, UDP_GRO, &on, sizeof(on));
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
 * one sendmsg, one trip down the stack, per run (UDZ_UDP_RUN_DGRAMS, UDZ_UDP_GSO_BYTES). Returns datagrams
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
        while ((i < n) && (i - start < (int)UDZ_UDP_RUN_DGRAMS)) {
            len = txmsg_len(&msgs[i]);
            if ((niov + msgs[i].iovcnt > UDZ_UDP_BATCH * (1 + UDZ_MAX_IOV)) ||
                ((i > start) && ((len > seg) || (bytes + len > UDZ_UDP_GSO_BYTES)))) {
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

int udz_udp_send_many(udz_udp_t *u, struct sockaddr_in *sin, const udz_txmsg_t *msgs, int n)
{
    int i, m, rc, total = 0;

    if (u->gso) {
        /* up to UDZ_UDP_BATCH runs and their iovecs per call (two runs of 44 zero-copy
         * chunks fit: ztx_batch) */
        rc = udz_udp_send_gso(u, sin, msgs, n);
        if (rc != -EIO) {
            return rc;
        }
        u->gso = 0;     /* refused by this path: plain datagrams from now on */
    }
    /* plain datagrams, UDZ_UDP_BATCH per sendmmsg */
    while (total < n) {
        m = (n - total < (int)UDZ_UDP_BATCH) ? n - total : (int)UDZ_UDP_BATCH;
        for (i = 0; i < m; ++i) {
            memset(&u->mm[i], 0, sizeof(u->mm[i]));
            u->mm[i].msg_hdr.msg_name    = sin;
            u->mm[i].msg_hdr.msg_namelen = sizeof(*sin);
            u->mm[i].msg_hdr.msg_iov     = (struct iovec*)msgs[total + i].iov;
            u->mm[i].msg_hdr.msg_iovlen  = (size_t)msgs[total + i].iovcnt;
        }
        rc = sendmmsg(u->fd, u->mm, (unsigned)m, MSG_DONTWAIT);
        if ((rc < 0) && (errno == ECONNREFUSED)) {
            u->errq = 1;
            rc = sendmmsg(u->fd, u->mm, (unsigned)m, MSG_DONTWAIT);
        }
        if (rc < 0) {
            if ((total > 0) || (errno == EAGAIN) || (errno == ENOBUFS) || (errno == EINTR)) {
                return total;
            }
            return -errno;
        }
        total += rc;
        if (rc < m) {
            break;
        }
    }
    return total;
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
        if ((j > 0) && ((size_t)(n - j) * pair < UDZ_UDP_RUN_BYTES) && (n - j < (int)UDZ_UDP_RUN_DGRAMS)) {
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
        udz_udp_src_addr(&name, mh.msg_namelen, &src);  /* one sender for the whole run */
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
         * only into room for a whole one: UDZ_UDP_RUN_DGRAMS or UDZ_UDP_RUN_BYTES); should a
         * longer one come, its tail was cut by the kernel (MSG_TRUNC) and is lost like a
         * dropped datagram */
    }
    return j;
}

int udz_udp_chan_recv(void *wire, unsigned chan, udz_rxmsg_t *msgs, int n)
{
    udz_udp_t *u = wire;
    int fd = u->chan_fd[chan];
    int rc;

    if (u->gro && u->chan_gro[chan]) {
        int runs = 0;

        rc = udz_udp_recv_gro(u, fd, msgs, (n > (int)UDZ_UDP_RUN_DGRAMS) ?
                                           (int)UDZ_UDP_RUN_DGRAMS : n, &runs);
        if (runs > 0) {
            u->chan_count[chan] = 0;
        } else if ((rc > 0) && ((u->chan_count[chan] += (uint32_t)rc) >= UDZ_UDP_GRO_OFF)) {
            /* nothing coalesces on this path: one call per batch beats one per datagram.
             * (A run queued before the switch would be cut by recvmmsg: a rare loss, which
             * the transfer repairs.) */
            (void)udz_udp_chan_set_gro(fd, 0);
            u->chan_gro[chan]   = 0;
            u->chan_count[chan] = 0;
        }
        return rc;
    }
    if (n > UDZ_UDP_BATCH) {
        n = UDZ_UDP_BATCH;
    }
    udz_udp_mm_prep(u, msgs, n);
    rc = recvmmsg(fd, u->mm, (unsigned)n, MSG_DONTWAIT, NULL);
    if (rc < 0) {
        return ((errno == EAGAIN) || (errno == EINTR)) ? 0 : -errno;
    }
    if (u->gro && ((u->chan_count[chan] += (uint32_t)rc) >= UDZ_UDP_GRO_PROBE)) {
        /* try runs again: the path (or the peer's GSO) may have changed */
        u->chan_gro[chan]   = (udz_udp_chan_set_gro(fd, 1) == 0);
        u->chan_count[chan] = 0;
    }
    udz_udp_mm_done(u, msgs, rc);
    return rc;
}

/* A channel is named by its index in the block after the control port (udz_udp_open_block). */
uint32_t udz_udp_chan_id(void *wire __attribute__((unused)), unsigned chan)
{
    return chan;
}

/* Channel chan_id of the peer at ctrl: a port of the block its address announced, nothing
 * else (a ZREQ naming any other is refused: an owner never sends a transfer to a port the
 * requester did not announce, whatever a forged ZREQ says). */
int udz_udp_chan_addr(void *wire __attribute__((unused)), const udz_addr_t *ctrl,
                      const udz_chans_t *chans, uint32_t chan_id, udz_addr_t *out)
{
    struct in_addr ip;
    uint16_t port;
    unsigned n = chans->b[0];

    if (chan_id >= UDZ_MAX_CHANNELS) {
        return -EINVAL;     /* no wire has such a channel, announced or not: refused at once */
    }
    if (n == 0) {
        return -ENOENT;
    }
    udz_udp_addr_split(ctrl, &ip, &port);
    /* addr_unpack bounded n and port + n; checked again here, unsigned, overflow-free */
    if ((chan_id >= n) || ((unsigned)ntohs(port) + 1u + chan_id > 65535u)) {
        return -EINVAL;
    }
    udz_udp_addr_make(ip, htons((uint16_t)(ntohs(port) + 1u + chan_id)), out);
    return 0;
}
