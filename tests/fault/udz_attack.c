/*
 * An attacker of ud_zcopy over UDP, for the fault tier's attack cases (tests/fault/attack): it
 * sends what a stranger on the network can send, bounded in count and time, to the addresses
 * it is given (the test's own namespaces), and prints what it sent.
 *
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

static void usage(void)
{
    fprintf(stderr, "usage: udz_attack flood --to IP --ports P,P,... [--count N] "
                    "[--seconds S] [--seed X]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    struct sockaddr_in to;
    int have_to = 0, nports = 0, ports[256], i;
    long count = 1000;
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
        } else if (!strcmp(argv[i], "--seed")) {
            rng_state = strtoull(argv[i + 1], NULL, 0) | 1;
        } else {
            usage();
        }
    }
    if ((count <= 0) || (seconds <= 0) || (seconds > 600)) {
        usage();   /* bounded in count and time */
    }
    if (!strcmp(argv[1], "flood") && have_to && (nports > 0)) {
        return attack_flood(&to, ports, nports, count, seconds);
    }
    usage();
    return 2;
}
