/*
 * process_vm_rate: the kernel's floor under a zero copy on shared memory, without UCX. A child
 * process holds a buffer; this process reads it with process_vm_readv (what rdmach's and UCX's
 * cma zero copies do, one call per message or chunk) and, for comparison, copies a buffer of
 * its own with memcpy (what a ring's or FIFO's copy does), both hot in cache, per size:
 *
 *   process_vm_rate [SIZES...]     (bytes; default 16384 65536 262144 1048576 4194304)
 *
 * Prints per size the time of one call, its rate, and how many memcpy of the same bytes it is
 * worth. The kernel pins and walks the other process's pages on every call, which a memcpy
 * does not pay: on this project's 2-core VM (AMD EPYC, kernel 6.18) a 64 KiB read took 5.9-7.4
 * us, ten memcpys' worth (perf/RESULTS.md, "What bounds the misses").
 */
#ifndef _GNU_SOURCE
#  define _GNU_SOURCE
#endif
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_SIZE (64ul << 20)

static double now_s(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    static const size_t defaults[] = {16384, 65536, 262144, 1048576, 4194304};
    size_t nsizes = (argc > 1) ? (size_t)argc - 1 : sizeof(defaults) / sizeof(defaults[0]);
    char *src, *dst;
    size_t i, s;
    pid_t child;
    long k, n;
    double t, pvm, cpy;

    src = aligned_alloc(4096, MAX_SIZE);
    dst = aligned_alloc(4096, MAX_SIZE);
    if ((src == NULL) || (dst == NULL)) {
        fprintf(stderr, "process_vm_rate: no memory\n");
        return 1;
    }
    memset(src, 1, MAX_SIZE);
    memset(dst, 2, MAX_SIZE);
    child = fork();
    if (child == 0) {
        pause();    /* holds src (copy-on-write, touched above: its pages are present) */
        return 0;
    }
    if (child < 0) {
        perror("process_vm_rate: fork");
        return 1;
    }
    printf("%10s %12s %10s %12s %10s %8s\n", "bytes", "pvm us", "pvm GB/s", "memcpy us",
           "cpy GB/s", "ratio");
    for (i = 0; i < nsizes; ++i) {
        s = (argc > 1) ? strtoul(argv[i + 1], NULL, 0) : defaults[i];
        if ((s == 0) || (s > MAX_SIZE)) {
            fprintf(stderr, "process_vm_rate: sizes are 1-%lu bytes\n", MAX_SIZE);
            break;
        }
        struct iovec l = {dst, s}, r = {src, s};
        n = (long)(200000000 / s) + 10;
        t = now_s();
        for (k = 0; k < n; ++k) {
            if (process_vm_readv(child, &l, 1, &r, 1, 0) != (ssize_t)s) {
                perror("process_vm_rate: process_vm_readv");
                kill(child, SIGKILL);
                return 1;
            }
        }
        pvm = (now_s() - t) / n;
        t   = now_s();
        for (k = 0; k < n; ++k) {
            memcpy(dst, src, s);
            __asm__ volatile("" ::"r"(dst) : "memory");   /* each copy happens */
        }
        cpy = (now_s() - t) / n;
        printf("%10zu %12.3f %10.1f %12.3f %10.1f %8.2f\n", s, pvm * 1e6, s / pvm / 1e9,
               cpy * 1e6, s / cpy / 1e9, pvm / cpy);
    }
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    return 0;
}
