/*
 * udp_gso_send: what the kernel's send path costs ud_zcopy's eager messages across a network,
 * without UCX. The sender sends N messages of 12 datagrams of 1,472 bytes (a 16 KiB eager
 * message on a 1500-byte MTU, as ud_zcopy's send coalescing hands it to the kernel: one UDP GSO
 * send) or the same bytes by TCP; the receiver reads them (UDP with UDP_GRO, as ud_zcopy's
 * control socket does). Run each side in its own network namespace (tests/mpi/hosts.sh) and
 * the sender under `perf record` to see where its time goes.
 *
 *   udp_gso_send recv  udp|tcp N
 *   udp_gso_send send  DST_IPV4 gso|iov|tcp N [--pace US]
 *   udp_gso_send echo  udp|tcp SIZE N
 *   udp_gso_send ping  DST_IPV4 udp|tcp SIZE N
 *
 *   gso   one sendmsg per message from one contiguous buffer (UDP_SEGMENT 1472)
 *   iov   the same from 12 buffers of a pool of 1,024 (ud_zcopy's packets), written first
 *   tcp   non-blocking sends of the message's bytes, retried until all went
 *   --pace  sleep US microseconds after every message (the receiver keeps up); otherwise
 *           UDP pauses 200 us every 64 messages only (the receiver lags by up to 64)
 *
 * Prints the sender's microseconds in send calls per message and the rate; the receiver its
 * rate and its largest single receive (a GSO run that crossed whole: 17,664).
 *
 * ping / echo: a ping-pong of SIZE-byte messages, both sides spinning on non-blocking calls as
 * UCX's progress does; UDP sends a message as one GSO send of 1,472-byte datagrams (a 2 KiB
 * message: two) and receives it with UDP_GRO, TCP with one send and recv until whole. ping
 * prints the median and 90th percentile of half the round trip.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <netinet/tcp.h>

#ifndef SOL_UDP
#define SOL_UDP 17
#endif
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

#define SEG   1472
#define NSEG  12
#define MSG   (SEG * NSEG)
#define POOL  1024
#define PORT  7777

static double now(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int usage(void)
{
    fprintf(stderr, "usage: udp_gso_send recv udp|tcp N\n"
                    "       udp_gso_send send DST_IPV4 gso|iov|tcp N [--pace US]\n"
                    "       udp_gso_send echo udp|tcp SIZE N\n"
                    "       udp_gso_send ping DST_IPV4 udp|tcp SIZE N\n");
    return 2;
}

/* The receiving side's socket on PORT: TCP's accepted connection, or UDP's bound socket. */
static int serve_socket(int tcp, int rcvbuf)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(PORT)};
    int fd = socket(AF_INET, tcp ? SOCK_STREAM : SOCK_DGRAM, 0), one = 1;

    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (rcvbuf > 0) {
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    }
    if (bind(fd, (struct sockaddr*)&a, sizeof(a)) != 0) {
        perror("udp_gso_send: bind");
        return -1;
    }
    if (tcp) {
        listen(fd, 1);
        fd = accept(fd, NULL, NULL);
    }
    return fd;
}

static int do_recv(int tcp, long n)
{
    int fd = serve_socket(tcp, 8 << 20), one = 1;
    long bytes = 0, want = n * (long)MSG, maxr = 0;
    static char buf[65536];
    double t0 = 0;
    ssize_t r;

    if (fd < 0) {
        return 1;
    }
    if (!tcp && (setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof(one)) != 0)) {
        perror("udp_gso_send: UDP_GRO");
        return 1;
    }
    while (bytes < want) {
        r = recv(fd, buf, sizeof(buf), 0);
        if (r <= 0) {
            break;
        }
        if (t0 == 0) {
            t0 = now();
        }
        bytes += r;
        maxr = (r > maxr) ? r : maxr;
    }
    printf("recv %ld bytes, %.1f MB/s, largest receive %ld\n", bytes,
           (double)bytes / (now() - t0) / 1e6, maxr);
    return 0;
}

static int do_send(const char *dst, const char *mode, long n, long pace)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(PORT)};
    int tcp = !strcmp(mode, "tcp"), iov_mode = !strcmp(mode, "iov"), gso = SEG;
    int fd = socket(AF_INET, tcp ? SOCK_STREAM : SOCK_DGRAM, 0), big = 4 << 20, k, next = 0;
    static char contig[MSG];
    char *pool[POOL];
    struct iovec iov[NSEG];
    struct msghdr mh;
    double t_send = 0, t0, a0, d;
    size_t off;
    ssize_t r;
    long i;

    if ((inet_pton(AF_INET, dst, &a.sin_addr) != 1) ||
        (!tcp && !iov_mode && strcmp(mode, "gso"))) {
        return usage();
    }
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
    if (connect(fd, (struct sockaddr*)&a, sizeof(a)) != 0) {
        perror("udp_gso_send: connect");
        return 1;
    }
    if (!tcp && (setsockopt(fd, SOL_UDP, UDP_SEGMENT, &gso, sizeof(gso)) != 0)) {
        perror("udp_gso_send: UDP_SEGMENT");
        return 1;
    }
    for (k = 0; k < POOL; ++k) {
        pool[k] = malloc(SEG + 128);
        memset(pool[k], 2, SEG + 128);
    }
    t0 = now();
    for (i = 0; i < n; ++i) {
        memset(&mh, 0, sizeof(mh));
        if (iov_mode) {
            for (k = 0; k < NSEG; ++k) {
                memset(pool[next], (int)i, SEG);     /* UCP packs into the packet */
                iov[k].iov_base = pool[next];
                iov[k].iov_len  = SEG;
                next            = (next + 1) % POOL;
            }
            mh.msg_iovlen = NSEG;
        } else {
            memset(contig, (int)i, MSG);
            iov[0].iov_base = contig;
            iov[0].iov_len  = MSG;
            mh.msg_iovlen   = 1;
        }
        mh.msg_iov = iov;
        if (tcp) {
            for (off = 0; off < MSG;) {
                a0 = now();
                r  = send(fd, contig + off, MSG - off, MSG_DONTWAIT);
                d  = now() - a0;
                if (r > 0) {
                    off    += (size_t)r;
                    t_send += d;
                } else if (errno != EAGAIN) {
                    perror("udp_gso_send: send");
                    return 1;
                }
            }
        } else {
            a0 = now();
            do {
                r = sendmsg(fd, &mh, 0);
            } while ((r < 0) && ((errno == EAGAIN) || (errno == ENOBUFS)));
            if (r < 0) {
                perror("udp_gso_send: sendmsg");
                return 1;
            }
            t_send += now() - a0;
        }
        if (pace > 0) {
            usleep((useconds_t)pace);
        } else if (!tcp && ((i % 64) == 63)) {
            usleep(200);    /* no flow control: let the receiver drain */
        }
    }
    printf("%s: %.2f us in send calls per %d-byte message, %.1f MB/s\n", mode,
           t_send / (double)n * 1e6, MSG, (double)n * MSG / (now() - t0) / 1e6);
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double*)a, y = *(const double*)b;

    return (x > y) - (x < y);
}

/* One message of size bytes: UDP one GSO send, TCP sends until all went (spinning). */
static int pp_send(int fd, int tcp, const char *buf, size_t size)
{
    size_t off = 0;
    ssize_t r;

    while (off < size) {
        r = send(fd, buf + off, size - off, MSG_DONTWAIT);
        if (r > 0) {
            off += tcp ? (size_t)r : size;
        } else if ((errno != EAGAIN) && (errno != ENOBUFS)) {
            perror("udp_gso_send: send");
            return -1;
        }
    }
    return 0;
}

/* Spins until size bytes came (UDP: the run, or its datagrams one by one without GRO). */
static int pp_recv(int fd, char *buf, size_t size)
{
    size_t have = 0;
    ssize_t r;

    while (have < size) {
        r = recv(fd, buf + have, 65536, MSG_DONTWAIT);
        if (r > 0) {
            have += (size_t)r;
        } else if ((r == 0) || (errno != EAGAIN)) {
            return -1;
        }
    }
    return 0;
}

static int do_pingpong(const char *dst, int tcp, size_t size, long n)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(PORT)};
    int fd, one = 1, gso = SEG;
    char *buf = calloc(1, size + 65536);
    double *t = calloc((size_t)n, sizeof(double)), t0;
    long i;

    if (dst == NULL) {      /* echo */
        if ((fd = serve_socket(tcp, 0)) < 0) {
            return 1;
        }
        if (!tcp) {
            struct sockaddr_in from;
            socklen_t fl = sizeof(from);
            char c;
            /* the pinger's first datagram names it */
            if (recvfrom(fd, &c, 1, 0, (struct sockaddr*)&from, &fl) < 0) {
                return 1;
            }
            connect(fd, (struct sockaddr*)&from, fl);
        }
    } else {
        fd = socket(AF_INET, tcp ? SOCK_STREAM : SOCK_DGRAM, 0);
        inet_pton(AF_INET, dst, &a.sin_addr);
        if (connect(fd, (struct sockaddr*)&a, sizeof(a)) != 0) {
            perror("udp_gso_send: connect");
            return 1;
        }
        if (!tcp) {
            (void)!send(fd, "h", 1, 0);
        }
    }
    if (tcp) {
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    } else if ((setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof(one)) != 0) ||
               ((size > SEG) &&
                (setsockopt(fd, SOL_UDP, UDP_SEGMENT, &gso, sizeof(gso)) != 0))) {
        perror("udp_gso_send: UDP_GRO / UDP_SEGMENT");
        return 1;
    }
    for (i = 0; i < n; ++i) {
        if (dst == NULL) {
            if ((pp_recv(fd, buf, size) != 0) || (pp_send(fd, tcp, buf, size) != 0)) {
                return 1;
            }
            continue;
        }
        t0 = now();
        if ((pp_send(fd, tcp, buf, size) != 0) || (pp_recv(fd, buf, size) != 0)) {
            return 1;
        }
        t[i] = (now() - t0) / 2 * 1e6;
    }
    if (dst != NULL) {
        qsort(t, (size_t)n, sizeof(double), cmp_double);
        printf("%s %zu: half round trip median %.2f us, p90 %.2f us\n", tcp ? "tcp" : "udp", size,
               t[n / 2], t[n * 9 / 10]);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if ((argc == 5) && !strcmp(argv[1], "echo")) {
        return do_pingpong(NULL, !strcmp(argv[2], "tcp"), (size_t)atol(argv[3]), atol(argv[4]));
    }
    if ((argc == 6) && !strcmp(argv[1], "ping")) {
        return do_pingpong(argv[2], !strcmp(argv[3], "tcp"), (size_t)atol(argv[4]),
                           atol(argv[5]));
    }
    if ((argc == 4) && !strcmp(argv[1], "recv")) {
        return do_recv(!strcmp(argv[2], "tcp"), atol(argv[3]));
    }
    if ((argc == 5) && !strcmp(argv[1], "send")) {
        return do_send(argv[2], argv[3], atol(argv[4]), 0);
    }
    if ((argc == 7) && !strcmp(argv[1], "send") && !strcmp(argv[5], "--pace")) {
        return do_send(argv[2], argv[3], atol(argv[4]), atol(argv[6]));
    }
    return usage();
}
