/*
 * memcpy_alias: how fast this machine copies by the distance between the two buffers modulo a
 * page, without UCX. For each distance (destination minus source, modulo 4 KiB) it times
 * glibc's memcpy, the project's ucx_ext_memcpy (uct/common/ucx_ext_sys.h) and a
 * process_vm_readv from another process, of a buffer hot in cache:
 *
 *   memcpy_alias [SIZE]        (bytes, default 16384; process_vm_readv 4x that)
 *
 * Why: on AMD's Zen cores (FSRM) a REP MOVSB whose destination lies 1-31 bytes past its
 * source modulo 4 KiB runs about 30x slower than at other distances; glibc's memcpy uses it
 * from about 2 KiB, and the kernel's copy in process_vm_readv does too. malloc's large blocks
 * start 16 bytes into a page, a transport's buffers at page boundaries: a copy between them
 * is 16 bytes off. On the project's AMD EPYC VM (glibc 2.36, kernel 6.18), 16 KiB: 1.7-2.6
 * GB/s at 1-31 against 34-86 elsewhere; process_vm_readv of 64 KiB 1.2-2.2 against 6.3-8.9
 * (perf/RESULTS.md, "Copies 1-31 bytes off a page's alignment").
 */
#ifndef _GNU_SOURCE
#  define _GNU_SOURCE
#endif
#include "ucx_ext_sys.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_SIZE (16ul << 20)

typedef void (*copy_fn_t)(void *dst, const void *src, size_t len);

static void copy_glibc(void *dst, const void *src, size_t len)
{
    memcpy(dst, src, len);
}

/* GB/s of copies of size bytes, about 1 GB in all */
static double copy_rate(copy_fn_t fn, char *dst, const char *src, size_t size)
{
    long k, n = (long)(1000000000ul / size) + 1;
    uint64_t t = ucx_ext_now_ns();

    for (k = 0; k < n; ++k) {
        fn(dst, src, size);
        __asm__ volatile("" ::"r"(dst) : "memory");   /* each copy happens */
    }
    return (double)size * n / (double)(ucx_ext_now_ns() - t);
}

static double pvm_rate(pid_t child, char *dst, const char *src, size_t size)
{
    struct iovec l = {dst, size}, r = {(void*)src, size};
    long k, n = (long)(200000000ul / size) + 1;
    uint64_t t = ucx_ext_now_ns();

    for (k = 0; k < n; ++k) {
        if (process_vm_readv(child, &l, 1, &r, 1, 0) != (ssize_t)size) {
            return 0;
        }
    }
    return (double)size * n / (double)(ucx_ext_now_ns() - t);
}

int main(int argc, char **argv)
{
    static const size_t deltas[] = {0, 1, 8, 16, 31, 32, 48, 63, 64, 128, 2048, 4032, 4080};
    size_t size = (argc > 1) ? strtoul(argv[1], NULL, 0) : 16384, i;
    char *src, *dst;
    pid_t child;

    if ((size == 0) || (4 * size > MAX_SIZE)) {
        fprintf(stderr, "memcpy_alias: SIZE is 1 byte-%lu\n", MAX_SIZE / 4);
        return 2;
    }
    src = aligned_alloc(4096, MAX_SIZE + 4096);
    dst = aligned_alloc(4096, MAX_SIZE + 4096);
    if ((src == NULL) || (dst == NULL)) {
        fprintf(stderr, "memcpy_alias: no memory\n");
        return 1;
    }
    memset(src, 1, MAX_SIZE + 4096);
    memset(dst, 2, MAX_SIZE + 4096);
    child = fork();
    if (child == 0) {
        pause();   /* holds src for process_vm_readv */
        return 0;
    }
    if (child < 0) {
        perror("memcpy_alias: fork");
        return 1;
    }
    printf("# GB/s by (destination - source) modulo 4096; memcpy and ucx_ext_memcpy of %zu "
           "bytes, process_vm_readv of %zu\n", size, 4 * size);
    printf("%6s %10s %15s %17s\n", "delta", "memcpy", "ucx_ext_memcpy", "process_vm_readv");
    for (i = 0; i < sizeof(deltas) / sizeof(deltas[0]); ++i) {
        printf("%6zu %10.1f %15.1f %17.1f\n", deltas[i],
               copy_rate(copy_glibc, dst + deltas[i], src, size),
               copy_rate(ucx_ext_memcpy, dst + deltas[i], src, size),
               pvm_rate(child, dst + deltas[i], src, 4 * size));
    }
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    return 0;
}
