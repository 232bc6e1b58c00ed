/*
 * An attacker of ud_zcopy over UDP, for the fault tier's attack cases (tests/fault/attack): it
 * sends what a stranger on the network can send, bounded in count and time, to the addresses
 * it is given (the test's own namespaces), and prints what it sent.
 *
 *   udz_attack flood --to IP --ports P,P,... [--count N] [--seconds S] [--seed X]
 *       datagrams at every port in turn: a third random bytes of random length, a third with
 *       ud_zcopy's magic and version and random everything else, a third with a header whose
 *       length lies about the datagram's (longer or shorter than what follows).
 *   udz_attack forge --to IP --ports P,... [--sources N] [--foreign PORT] [--seconds S]
 *       an observer: captures the job's datagrams (AF_PACKET, in its own namespace) until it
 *       sees a ZREQ to IP (one of the given ports), which gives it the owner's cookie, a
 *       registered region and its rkey; then, from N fresh source ports of its own address,
 *       sends each a ZREQ for that region with a window of 2^32-1 chunks whose data channel
 *       is PORT, where it listens and counts what arrives (2 s after the last request). An
 *       owner that trusted a request would stream the region there.
 *   udz_attack reflect --to IP --ports P,... [--sources N] [--foreign PORT] [--seconds S]
 *       an observer that proves its address: sniffs a ZREQ as forge does (any wire version up
 *       to this one's, copied into what it forges), then from N fresh source ports of its own
 *       sends each a ZREQ for that region (window 2^32-1, data channel PORT), echoes every
 *       address challenge the owner sends those sources, and counts what reaches PORT until
 *       2 s pass without any. Against a long-lived registration (tests/fault/udz_victim).
 *   udz_attack zflood --to IP --ports P,... [--sources N] [--foreign PORT] [--seconds S]
 *                     [--rate R]
 *       a ZREQ flood: sniffs a ZREQ as forge does, then sends R forged ZREQs a second for S
 *       seconds from N fresh source ports in turn, each source's next reliable packet (every
 *       one is taken), half naming data channel 0 and half PORT.
 * Ends with "udz_attack: sent N" (and the first error, if sending failed).
 */
#include "udz_proto.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* xorshift64*: reproducible from --seed */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

static int attack_flood(const struct sockaddr_in *to, const int *ports, int nports, long count,
                        double seconds)
{
    uint8_t buf[2048];
    struct sockaddr_in dst = *to;
    udz_hdr_t h;
    double end = now() + seconds;
    long sent = 0, failed = 0;
    size_t len, i;
    int fd;

    fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0) {
        perror("udz_attack: UDP socket");
        return 1;
    }
    while ((sent + failed < count) && (now() < end)) {
        uint64_t r = rnd();

        dst.sin_port = htons((uint16_t)ports[(sent + failed) % nports]);
        len = (size_t)(rnd() % 1473);
        for (i = 0; i < len; i += 8) {
            uint64_t v = rnd();
            memcpy(buf + i, &v, (len - i < 8) ? len - i : 8);
        }
        if ((r % 3 != 0) && (len >= sizeof(h))) {
            memcpy(&h, buf, sizeof(h));
            h.magic   = UDZ_MAGIC;
            h.version = UDZ_VERSION;
            h.type    = (uint8_t)(rnd() % 18);
            h.len     = (uint16_t)((r % 3 == 1) ? len - sizeof(h) :   /* honest length */
                                   rnd() % 65536);                    /* a lie */
            memcpy(buf, &h, sizeof(h));
        }
        if (sendto(fd, buf, len, 0, (const struct sockaddr*)&dst, sizeof(dst)) < 0) {
            ++failed;   /* a full socket buffer, an ICMP error of an earlier one */
            if (errno == ENOBUFS || errno == EAGAIN) {
                usleep(100);
            }
            continue;
        }
        ++sent;
    }
    close(fd);
    printf("udz_attack: sent %ld datagrams to %d ports (%ld sends failed)\n", sent, nports,
           failed);
    return 0;
}

/* A socket bound to the foreign port the forged requests name: whatever reaches it is what an
 * amplifier would send a victim (-1 on failure, reported). */
static int foreign_port_open(int foreign)
{
    struct sockaddr_in me;
    int fd = socket(AF_INET, SOCK_DGRAM, 0);

    memset(&me, 0, sizeof(me));
    me.sin_family = AF_INET;
    me.sin_port   = htons((uint16_t)foreign);
    if ((fd < 0) || (bind(fd, (const struct sockaddr*)&me, sizeof(me)) != 0)) {
        perror("udz_attack: foreign port");
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }
    return fd;
}

/* Captures IPv4 datagrams until one to `to` on one of the ports carries a ZREQ; 0 when found. */
static int forge_sniff(const struct sockaddr_in *to, const int *ports, int nports, double end,
                       udz_hdr_t *hdr, udz_zreq_t *req, uint16_t *port)
{
    uint8_t pkt[65536];
    /* ETH_P_ALL: a tap of one protocol sees only what the host receives, not what it sends
     * (rank 1's requests leave this namespace) */
    int fd = socket(AF_PACKET, SOCK_DGRAM, htons(ETH_P_ALL)), i;
    struct pollfd pfd;
    ssize_t n;
    long seen = 0, udp_to = 0, udz_to = 0;

    if (fd < 0) {
        perror("udz_attack: AF_PACKET socket");
        return -1;
    }
    pfd.fd = fd;
    pfd.events = POLLIN;
    while (now() < end) {
        if (poll(&pfd, 1, 100) <= 0) {
            continue;
        }
        n = recv(fd, pkt, sizeof(pkt), 0);
        if (n < (ssize_t)sizeof(struct iphdr)) {
            continue;
        }
        const struct iphdr *ip = (const struct iphdr*)pkt;
        size_t ihl = (size_t)ip->ihl * 4;
        if (ip->version != 4) {
            continue;
        }
        ++seen;
        if ((ip->protocol != IPPROTO_UDP) || (ip->daddr != to->sin_addr.s_addr)) {
            continue;
        }
        ++udp_to;
        if ((size_t)n < ihl + sizeof(struct udphdr) + UDZ_HDR_LEN + sizeof(*req)) {
            continue;
        }
        const struct udphdr *u = (const struct udphdr*)(pkt + ihl);
        const uint8_t *d = pkt + ihl + sizeof(*u);
        memcpy(hdr, d, sizeof(*hdr));
        udz_to += (hdr->magic == UDZ_MAGIC);
        /* any version up to ours: the forgery copies the one the job speaks (UDZ_ATTACK aims
         * this attacker at an older build's job) */
        if ((hdr->magic != UDZ_MAGIC) || (hdr->version == 0) || (hdr->version > UDZ_VERSION) ||
            (hdr->type != UDZ_T_ZREQ) || (hdr->len != sizeof(*req))) {
            continue;
        }
        for (i = 0; i < nports; ++i) {
            if (ntohs(u->dest) == ports[i]) {
                memcpy(req, d + UDZ_HDR_LEN, sizeof(*req));
                *port = ntohs(u->dest);
                close(fd);
                return 0;
            }
        }
    }
    close(fd);
    fprintf(stderr, "udz_attack: captured %ld IPv4 packets, %ld UDP to the target, %ld of them "
            "ud_zcopy's, no ZREQ\n", seen, udp_to, udz_to);
    return -1;
}

static int attack_forge(const struct sockaddr_in *to, const int *ports, int nports, long sources,
                        int foreign, double seconds)
{
    double end = now() + seconds;
    struct sockaddr_in dst = *to;
    uint8_t buf[UDZ_HDR_LEN + sizeof(udz_zreq_t)], junk[2048];
    udz_hdr_t h;
    udz_zreq_t q;
    uint16_t port;
    long sent = 0, failed = 0, got = 0, got_bytes = 0, i;
    int lfd, fd, *fds;
    double quiet;

    /* every source's socket is made first: the forged requests must follow the real one
     * within its transfer (a rendezvous buffer is registered for that long only) */
    {
        struct rlimit rl = {(rlim_t)sources + 64, (rlim_t)sources + 64};
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
    fds = calloc((size_t)sources, sizeof(*fds));
    for (i = 0; (fds != NULL) && (i < sources); ++i) {
        fds[i] = socket(AF_INET, SOCK_DGRAM, 0);
    }
    lfd = foreign_port_open(foreign);
    if ((fds == NULL) || (lfd < 0)) {
        return 1;
    }
    if (forge_sniff(to, ports, nports, end, &h, &q, &port) != 0) {
        printf("udz_attack: sent 0 (no ZREQ seen in %.0f s)\n", seconds);
        return 1;
    }
    dst.sin_port = htons(port);
    for (i = 0; (i < sources) && (now() < end); ++i) {
        udz_hdr_t f = h;
        udz_zreq_t r = q;

        f.src_cookie = rnd() | 1;   /* a new source: its own incarnation */
        f.psn        = 1;
        f.ack        = 1;
        f.flags      = 0;
        r.xfer_id    = (uint32_t)rnd();
        r.chan_id    = htons((uint16_t)foreign);   /* a port, as the wire named it before */
        r.window     = 0xffffffffu;
        memcpy(buf, &f, sizeof(f));
        memcpy(buf + sizeof(f), &r, sizeof(r));
        fd = fds[i];
        if ((fd < 0) || (sendto(fd, buf, sizeof(buf), 0, (const struct sockaddr*)&dst,
                                sizeof(dst)) < 0)) {
            ++failed;
        } else {
            ++sent;
        }
    }
    for (quiet = now() + 2; now() < quiet;) {
        ssize_t n = recv(lfd, junk, sizeof(junk), MSG_DONTWAIT);
        if (n > 0) {
            ++got;
            got_bytes += n;
        } else {
            usleep(1000);
        }
    }
    for (i = 0; i < sources; ++i) {
        if (fds[i] >= 0) {
            close(fds[i]);
        }
    }
    free(fds);
    close(lfd);
    printf("udz_attack: sent %ld forged ZREQs for %llu bytes (window 2^32-1, data channel %d) "
           "from %ld sources to port %u (%ld sends failed); the foreign port got %ld datagrams "
           "(%ld bytes)\n", sent, (unsigned long long)q.len, foreign, sent, port, failed, got,
           got_bytes);
    return 0;
}

/* An observer that proves its own address: from N fresh source ports it sends each a ZREQ for
 * the sniffed region (window 2^32-1, data channel PORT, a port of its host it listens on) and
 * echoes every address challenge the owner sends back, so that each source is a validated
 * peer; then counts what reaches PORT. An owner that sent a transfer wherever its ZREQ said
 * would stream the region there, the long-lived key's whole region per 88-byte request. */
static int attack_reflect(const struct sockaddr_in *to, const int *ports, int nports,
                          long sources, int foreign, double seconds)
{
    double end = now() + seconds, quiet;
    struct sockaddr_in dst = *to;
    uint8_t buf[UDZ_HDR_LEN + sizeof(udz_zreq_t)], in[2048];
    udz_hdr_t h;
    udz_zreq_t q;
    uint16_t port;
    uint64_t *cookie;
    long sent = 0, echoed = 0, got = 0, got_bytes = 0, i;
    struct pollfd *pfd;
    int lfd;

    pfd    = calloc((size_t)sources + 1, sizeof(*pfd));
    cookie = calloc((size_t)sources, sizeof(*cookie));
    lfd    = foreign_port_open(foreign);
    if ((pfd == NULL) || (cookie == NULL) || (lfd < 0)) {
        return 1;
    }
    if (forge_sniff(to, ports, nports, end, &h, &q, &port) != 0) {
        printf("udz_attack: sent 0 (no ZREQ seen in %.0f s)\n", seconds);
        return 1;
    }
    dst.sin_port = htons(port);
    for (i = 0; i < sources; ++i) {
        udz_hdr_t f = h;
        udz_zreq_t r = q;

        pfd[i].fd     = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
        pfd[i].events = POLLIN;
        cookie[i]     = rnd() | 1;      /* a new source: its own incarnation */
        f.src_cookie  = cookie[i];
        f.psn         = 1;
        f.ack         = 1;
        f.flags       = 0;
        r.xfer_id     = (uint32_t)rnd();
        /* the port as a wire that names channels by port reads it (network byte order,
         * udz_udp_chan_addr before it named an index); to one that names an index among the
         * announced channels it is an index far past any */
        r.chan_id     = htons((uint16_t)foreign);
        r.window      = 0xffffffffu;
        memcpy(buf, &f, sizeof(f));
        memcpy(buf + sizeof(f), &r, sizeof(r));
        if ((pfd[i].fd >= 0) && (sendto(pfd[i].fd, buf, sizeof(buf), 0,
                                        (const struct sockaddr*)&dst, sizeof(dst)) > 0)) {
            ++sent;
        }
    }
    pfd[sources].fd     = lfd;
    pfd[sources].events = POLLIN;
    /* answer challenges, and count what reaches the foreign port, until 2 s pass quietly */
    for (quiet = now() + 2; now() < quiet;) {
        if (poll(pfd, (nfds_t)sources + 1, 10) <= 0) {
            continue;
        }
        for (i = 0; i <= sources; ++i) {
            ssize_t n;

            if (!(pfd[i].revents & POLLIN)) {
                continue;
            }
            while ((n = recv(pfd[i].fd, in, sizeof(in), MSG_DONTWAIT)) > 0) {
                udz_hdr_t c;
                udz_chal_t ch;

                if (i == sources) {
                    ++got;
                    got_bytes += n;
                    quiet = now() + 2;
                    continue;
                }
                if ((size_t)n != UDZ_HDR_LEN + sizeof(ch)) {
                    continue;
                }
                memcpy(&c, in, sizeof(c));
                memcpy(&ch, in + UDZ_HDR_LEN, sizeof(ch));
                if ((c.magic != UDZ_MAGIC) || (c.type != UDZ_T_CHAL) || (ch.chal == 0) ||
                    (c.dst_cookie != cookie[i])) {
                    continue;
                }
                /* the echo: this source does receive at its address */
                c.dst_cookie = h.dst_cookie;
                c.src_cookie = cookie[i];
                c.psn        = 0;
                c.ack        = 1;
                c.flags      = 0;
                ch.echo      = ch.chal;
                ch.chal      = 0;
                memcpy(in, &c, sizeof(c));
                memcpy(in + UDZ_HDR_LEN, &ch, sizeof(ch));
                if (sendto(pfd[i].fd, in, UDZ_HDR_LEN + sizeof(ch), 0,
                           (const struct sockaddr*)&dst, sizeof(dst)) > 0) {
                    ++echoed;
                }
            }
        }
    }
    for (i = 0; i < sources; ++i) {
        if (pfd[i].fd >= 0) {
            close(pfd[i].fd);
        }
    }
    close(lfd);
    free(pfd);
    free(cookie);
    printf("udz_attack: sent %ld forged ZREQs (wire version %u) for a long-lived key's %llu "
           "bytes (window 2^32-1, data channel %d) from %ld validating sources to port %u, "
           "echoed %ld challenges; the foreign port got %ld datagrams (%ld bytes)\n", sent,
           h.version, (unsigned long long)q.len, foreign, sent, port, echoed, got, got_bytes);
    return 0;
}

/* A flood of forged ZREQs with a sniffed cookie and key: from N fresh source ports of its own,
 * in turn, each source's next reliable packet (psn 1, 2, ...: every one is taken, none is a
 * duplicate), at RATE per second for S seconds; half name data channel 0 (a channel the source
 * never announced), half the foreign PORT. The owner's state per source is bounded (64
 * transfers, then refusals), and what it answers is never larger than what came. */
static int attack_zflood(const struct sockaddr_in *to, const int *ports, int nports,
                         long sources, int foreign, double seconds, long rate)
{
    double t0, end;
    struct sockaddr_in dst = *to;
    uint8_t buf[UDZ_HDR_LEN + sizeof(udz_zreq_t)], junk[2048];
    udz_hdr_t h;
    udz_zreq_t q;
    uint16_t port;
    uint64_t *cookie;
    uint32_t *psn;
    long sent = 0, failed = 0, i;
    int *fds;

    fds    = calloc((size_t)sources, sizeof(*fds));
    cookie = calloc((size_t)sources, sizeof(*cookie));
    psn    = calloc((size_t)sources, sizeof(*psn));
    if ((fds == NULL) || (cookie == NULL) || (psn == NULL)) {
        perror("udz_attack: memory");
        return 1;
    }
    if (forge_sniff(to, ports, nports, now() + 30, &h, &q, &port) != 0) {
        printf("udz_attack: sent 0 (no ZREQ seen in 30 s)\n");
        return 1;
    }
    dst.sin_port = htons(port);
    for (i = 0; i < sources; ++i) {
        fds[i]    = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
        cookie[i] = rnd() | 1;
        psn[i]    = 1;
    }
    t0  = now();
    end = t0 + seconds;
    while (now() < end) {
        /* paced: at most rate per second, checked every 64 */
        if ((sent + failed) > (long)((now() - t0) * (double)rate)) {
            usleep(500);
            continue;
        }
        for (i = 0; i < 64; ++i) {
            long k = (sent + failed) % sources;
            udz_hdr_t f = h;
            udz_zreq_t r = q;

            f.src_cookie = cookie[k];
            f.psn        = psn[k];
            f.ack        = 1;
            f.flags      = 0;
            r.xfer_id    = (uint32_t)rnd();
            r.chan_id    = ((sent + failed) & 1) ? htons((uint16_t)foreign) : 0;
            r.window     = 0xffffffffu;
            memcpy(buf, &f, sizeof(f));
            memcpy(buf + sizeof(f), &r, sizeof(r));
            if ((fds[k] >= 0) && (sendto(fds[k], buf, sizeof(buf), 0,
                                         (const struct sockaddr*)&dst, sizeof(dst)) > 0)) {
                ++sent;
                ++psn[k];
            } else {
                ++failed;
            }
            /* what the owner answers (challenges, refusals, acks) is read and dropped */
            while (recv(fds[k], junk, sizeof(junk), MSG_DONTWAIT) > 0) {
            }
        }
    }
    for (i = 0; i < sources; ++i) {
        if (fds[i] >= 0) {
            close(fds[i]);
        }
    }
    free(fds);
    free(cookie);
    free(psn);
    printf("udz_attack: sent %ld forged ZREQs (wire version %u) in %.1f s from %ld sources to "
           "port %u (%ld sends failed)\n", sent, h.version, seconds, sources, port, failed);
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: udz_attack flood --to IP --ports P,P,... [--count N] "
                    "[--seconds S] [--seed X]\n"
                    "       udz_attack forge|reflect --to IP --ports P,P,... [--sources N] "
                    "[--foreign PORT] [--seconds S]\n"
                    "       udz_attack zflood --to IP --ports P,P,... [--sources N] "
                    "[--foreign PORT] [--seconds S] [--rate R]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    struct sockaddr_in to;
    int have_to = 0, nports = 0, ports[256], i;
    long count = 1000, sources = 1000, rate = 10000;
    int foreign = 9;
    double seconds = 10;
    char *tok, *save;

    if (argc < 2) {
        usage();
    }
    for (i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--to")) {
            memset(&to, 0, sizeof(to));
            to.sin_family = AF_INET;
            have_to = inet_pton(AF_INET, argv[i + 1], &to.sin_addr) == 1;
        } else if (!strcmp(argv[i], "--ports")) {
            for (tok = strtok_r(argv[i + 1], ",", &save); (tok != NULL) && (nports < 256);
                 tok = strtok_r(NULL, ",", &save)) {
                ports[nports++] = atoi(tok);
            }
        } else if (!strcmp(argv[i], "--count")) {
            count = atol(argv[i + 1]);
        } else if (!strcmp(argv[i], "--seconds")) {
            seconds = atof(argv[i + 1]);
        } else if (!strcmp(argv[i], "--sources")) {
            sources = atol(argv[i + 1]);
        } else if (!strcmp(argv[i], "--foreign")) {
            foreign = atoi(argv[i + 1]);
        } else if (!strcmp(argv[i], "--rate")) {
            rate = atol(argv[i + 1]);
        } else if (!strcmp(argv[i], "--seed")) {
            rng_state = strtoull(argv[i + 1], NULL, 0) | 1;
        } else {
            usage();
        }
    }
    if ((count <= 0) || (sources <= 0) || (sources > 100000) || (seconds <= 0) ||
        (seconds > 600)) {
        usage();   /* bounded in count and time */
    }
    if (!strcmp(argv[1], "flood") && have_to && (nports > 0)) {
        return attack_flood(&to, ports, nports, count, seconds);
    }
    if (!strcmp(argv[1], "forge") && have_to && (nports > 0) && (foreign > 0) &&
        (foreign < 65536)) {
        return attack_forge(&to, ports, nports, sources, foreign, seconds);
    }
    if (!strcmp(argv[1], "zflood") && have_to && (nports > 0) && (foreign > 0) &&
        (foreign < 65536) && (sources <= 4096) && (rate > 0) && (rate <= 1000000)) {
        return attack_zflood(&to, ports, nports, sources, foreign, seconds, rate);
    }
    if (!strcmp(argv[1], "reflect") && have_to && (nports > 0) && (foreign > 0) &&
        (foreign < 65536) && (sources <= 1000)) {
        return attack_reflect(&to, ports, nports, sources, foreign, seconds);
    }
    usage();
    return 2;
}
