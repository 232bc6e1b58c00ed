/*
 * sock_pingpong: the kernel's own floor under ud_zcopy and tcp on loopback, without UCX. One
 * process sends a burst of SIZE bytes, the other (on the other core) receives it whole and
 * answers with one byte; the sender times burst + answer. UDP sends the burst as ud_zcopy's
 * owner does (datagrams of a 32-byte header + a chunk straight from the buffer, sendmmsg) and
 * receives it as its requester does (recvmsg into [header, chunk] pairs, the chunk in place);
 * TCP sends it with send() and receives it with recv(), as UCX's tcp does.
 *
 *   sock_pingpong [--udp CHUNK | --tcp] [--poll] [-s SIZE] [-i ITERS] [--addr IPV4]
 *
 *   --udp   datagrams of CHUNK payload bytes + 32 header bytes (default 65475: loopback's
 *           largest, ud_zcopy's chunk there)
 *   --tcp   one stream
 *   --poll  both sides spin on non-blocking calls, as UCX's progress does (default: they
 *           block, and each burst pays a wakeup)
 *   -s      burst bytes (K/M suffixes; default 1M), -i bursts (default 2000)
 *   --addr  where the receiver listens (default 127.0.0.1)
 *
 * Prints "udp|tcp SIZE one-way median/p90 us, send calls median us". A burst whose datagrams
 * do not all arrive within a second is counted lost and not timed (the receiver starts over
 * at the next burst's id).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define HDR       32
#define MAX_DGRAM 1024

typedef struct {
    uint32_t burst, idx;
    uint8_t  pad[HDR - 8];
} hdr_t;

static double now_us(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

static void pin(int cpu)
{
    cpu_set_t cs;

    CPU_ZERO(&cs);
    CPU_SET(cpu, &cs);
    (void)sched_setaffinity(0, sizeof(cs), &cs);
}

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);

    if (*end == 'K' || *end == 'k') v *= 1024;
    if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
    return (size_t)v;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

static int spin;     /* --poll */

static void receiver(int tcp, int ls, size_t size, size_t chunk, struct sockaddr_in *ack_to)
{
    uint8_t *buf = aligned_alloc(4096, size + 4096);
    int as = socket(AF_INET, SOCK_DGRAM, 0), fd = ls, n, i;
    unsigned ndg = (unsigned)((size + chunk - 1) / chunk);
    uint32_t cur = 0, got = 0;
    hdr_t hdrs[64];
    struct mmsghdr mm[64];
    struct iovec iov[64][2];

    pin(1);
    if ((buf == NULL) || (as < 0) || connect(as, (struct sockaddr*)ack_to, sizeof(*ack_to))) {
        die("receiver");
    }
    if (tcp && ((fd = accept(ls, NULL, NULL)) < 0)) {
        die("accept");
    }
    for (;;) {
        if (tcp) {
            size_t have = 0;
            while (have < size) {
                ssize_t k = recv(fd, buf + have, size - have, spin ? MSG_DONTWAIT : 0);
                if ((k < 0) && (errno == EAGAIN)) {
                    continue;
                }
                if (k <= 0) {
                    return;
                }
                have += (size_t)k;
            }
            (void)send(as, "a", 1, 0);
            continue;
        }
        /* every slot predicts the next chunks of the current burst, as ud_zcopy's requester */
        for (i = 0; i < 64; ++i) {
            unsigned c = (got + (unsigned)i) % ndg;
            size_t off = (size_t)c * chunk;
            iov[i][0].iov_base = &hdrs[i];
            iov[i][0].iov_len  = HDR;
            iov[i][1].iov_base = buf + off;
            iov[i][1].iov_len  = chunk;
            memset(&mm[i], 0, sizeof(mm[i]));
            mm[i].msg_hdr.msg_iov    = iov[i];
            mm[i].msg_hdr.msg_iovlen = 2;
        }
        n = recvmmsg(fd, mm, 64, spin ? MSG_DONTWAIT : MSG_WAITFORONE, NULL);
        if ((n < 0) && (errno == EAGAIN)) {
            continue;
        }
        if (n <= 0) {
            return;
        }
        for (i = 0; i < n; ++i) {
            if (mm[i].msg_len < HDR) {
                return;     /* the sender's end-of-run datagram */
            }
            if (hdrs[i].burst != cur) {
                cur = hdrs[i].burst;     /* a new burst (the last one lost datagrams) */
                got = 0;
            }
            if (++got == ndg) {
                (void)send(as, "a", 1, 0);
                got = 0;
                cur++;
            }
        }
    }
}

int main(int argc, char **argv)
{
    size_t size = 1 << 20, chunk = 65475;
    int tcp = 0, iters = 2000, i, lost = 0, k;
    const char *addr = "127.0.0.1";
    struct sockaddr_in rx = {0}, ackaddr = {0};
    socklen_t len = sizeof(rx);
    int ls, as, s, big = 16 << 20, status;
    double *oneway, *sendt;
    uint8_t *buf;
    pid_t pid;

    for (i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--tcp")) {
            tcp = 1;
        } else if (!strcmp(argv[i], "--poll")) {
            spin = 1;
        } else if (!strcmp(argv[i], "--udp") && (i + 1 < argc)) {
            chunk = parse_size(argv[++i]);
        } else if (!strcmp(argv[i], "-s") && (i + 1 < argc)) {
            size = parse_size(argv[++i]);
        } else if (!strcmp(argv[i], "-i") && (i + 1 < argc)) {
            iters = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--addr") && (i + 1 < argc)) {
            addr = argv[++i];
        } else {
            fprintf(stderr, "usage: sock_pingpong [--udp CHUNK | --tcp] [--poll] [-s SIZE] "
                            "[-i ITERS] [--addr IPV4]\n");
            return 2;
        }
    }
    if ((size == 0) || (iters < 1) || (chunk == 0) || (chunk + HDR > 65507) ||
        (!tcp && ((size + chunk - 1) / chunk > MAX_DGRAM))) {
        fprintf(stderr, "sock_pingpong: bad size, chunk or iterations\n");
        return 2;
    }
    rx.sin_family = ackaddr.sin_family = AF_INET;
    if ((inet_pton(AF_INET, addr, &rx.sin_addr) != 1) ||
        (inet_pton(AF_INET, addr, &ackaddr.sin_addr) != 1)) {
        fprintf(stderr, "sock_pingpong: bad address %s\n", addr);
        return 2;
    }
    ls = socket(AF_INET, tcp ? SOCK_STREAM : SOCK_DGRAM, 0);
    as = socket(AF_INET, SOCK_DGRAM, 0);
    if ((ls < 0) || (as < 0)) {
        die("socket");
    }
    (void)setsockopt(ls, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big));
    if (bind(ls, (struct sockaddr*)&rx, sizeof(rx)) ||
        getsockname(ls, (struct sockaddr*)&rx, &len) || (tcp && listen(ls, 1)) ||
        bind(as, (struct sockaddr*)&ackaddr, sizeof(ackaddr)) ||
        getsockname(as, (struct sockaddr*)&ackaddr, &(socklen_t){sizeof(ackaddr)})) {
        die("bind");
    }
    pid = fork();
    if (pid == 0) {
        receiver(tcp, ls, size, chunk, &ackaddr);
        _exit(0);
    }
    pin(0);
    s = socket(AF_INET, tcp ? SOCK_STREAM : SOCK_DGRAM, 0);
    (void)setsockopt(s, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big));
    if ((s < 0) || connect(s, (struct sockaddr*)&rx, sizeof(rx))) {
        die("connect");
    }
    buf    = aligned_alloc(4096, size + 4096);
    oneway = calloc((size_t)iters, sizeof(double));
    sendt  = calloc((size_t)iters, sizeof(double));
    if ((buf == NULL) || (oneway == NULL) || (sendt == NULL)) {
        die("alloc");
    }
    memset(buf, 0x5a, size);
    k = 0;
    for (i = 0; i < iters + iters / 10; ++i) {
        double t0 = now_us(), t1;
        struct pollfd pf = {as, POLLIN, 0};
        char c;

        if (tcp) {
            size_t off = 0;
            while (off < size) {
                ssize_t w = send(s, buf + off, size - off, 0);
                if (w <= 0) {
                    die("send");
                }
                off += (size_t)w;
            }
        } else {
            static hdr_t hdrs[MAX_DGRAM];
            static struct iovec iov[MAX_DGRAM][2];
            static struct mmsghdr mm[MAX_DGRAM];
            unsigned n = 0, sent = 0;
            for (size_t off = 0; off < size; off += chunk, ++n) {
                hdrs[n].burst = (uint32_t)i;
                hdrs[n].idx   = n;
                iov[n][0].iov_base = &hdrs[n];
                iov[n][0].iov_len  = HDR;
                iov[n][1].iov_base = buf + off;
                iov[n][1].iov_len  = (size - off < chunk) ? size - off : chunk;
                memset(&mm[n], 0, sizeof(mm[n]));
                mm[n].msg_hdr.msg_iov    = iov[n];
                mm[n].msg_hdr.msg_iovlen = 2;
            }
            while (sent < n) {
                int w = sendmmsg(s, mm + sent, n - sent, 0);
                if (w <= 0) {
                    die("sendmmsg");
                }
                sent += (unsigned)w;
            }
        }
        t1 = now_us();
        if (spin) {
            while ((recv(as, &c, 1, MSG_DONTWAIT) != 1) && (now_us() - t1 < 1e6)) {
            }
            if (now_us() - t1 >= 1e6) {
                lost++;
                continue;
            }
        } else if ((poll(&pf, 1, 1000) != 1) || (recv(as, &c, 1, 0) != 1)) {
            lost++;
            continue;
        }
        if (i >= iters / 10) {
            oneway[k] = now_us() - t0;
            sendt[k]  = t1 - t0;
            k++;
        }
    }
    if (tcp) {
        close(s);
    } else {
        (void)send(s, "", 0, 0);     /* a datagram shorter than a header: the receiver ends */
    }
    waitpid(pid, &status, 0);
    if (k == 0) {
        fprintf(stderr, "sock_pingpong: every burst lost\n");
        return 1;
    }
    qsort(oneway, (size_t)k, sizeof(double), cmp_d);
    qsort(sendt, (size_t)k, sizeof(double), cmp_d);
    if (tcp) {
        printf("tcp %zu bytes%s:", size, spin ? ", polling" : "");
    } else {
        printf("udp %zu bytes in %zu-byte chunks%s:", size, chunk, spin ? ", polling" : "");
    }
    printf(" one-way median %.1f us p90 %.1f us, send calls median %.1f us, %d lost\n",
           oneway[k / 2], oneway[k * 9 / 10], sendt[k / 2], lost);
    return 0;
}
