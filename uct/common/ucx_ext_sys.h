/*
 * Plain-C helpers the shared-memory wires and HAL backends share: no UCX headers, so protocol
 * cores and wires can use them and unit tests link them alone.
 *
 * - A segment is a memfd mapped shared: it disappears with its last mapping, so a killed
 *   process leaks nothing; peers map it through /proc/<pid>/fd/<fd> (same user, or ptrace
 *   consent).
 * - Remote read/write of another process's memory is process_vm_readv/writev, with the loop
 *   over partial transfers that both syscalls need.
 * - A process is alive while /proc/<pid>/stat exists, is not a zombie, and has the start time
 *   seen at connection (robust to pid reuse).
 */
#ifndef UCX_EXT_SYS_H
#define UCX_EXT_SYS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if [address, address + length) lies inside [base, base + size), neither range wrapping
 * past 2^64: the check of every address a peer names (a sum address + length would wrap
 * and pass). */
static inline int ucx_ext_range_within(uint64_t address, uint64_t length, uint64_t base,
                                       uint64_t size)
{
    return (size <= UINT64_MAX - base) && (address >= base) && (length <= size) &&
           (address - base <= size - length);
}

/* Creates a memfd segment of size bytes (named name in /proc/<pid>/fd) and maps it shared.
 * 0 or -errno. */
int ucx_ext_seg_create(const char *name, size_t size, int *fd_p, void **base_p);

/* Maps process pid's segment fd. Fails with -EPROTO if it is smaller than min_size, -errno
 * otherwise (-ENOENT / -ESRCH: no such process or fd). The caller validates the contents:
 * nothing in a peer's segment is trusted. */
int ucx_ext_seg_attach(pid_t pid, int fd, size_t min_size, void **base_p, size_t *size_p);

/* The same, and the fd must still be the segment with inode ino (-ESTALE if it is not: the
 * owner closed it and the number went to another file); ino 0 checks nothing. */
int ucx_ext_seg_attach_ino(pid_t pid, int fd, uint64_t ino, size_t min_size, void **base_p,
                           size_t *size_p);

/* Makes the pages of [p, p + len) resident in this process now (write: for writing, which
 * also allocates a shared file's missing pages), so that a ring's first lap does not take a
 * page fault per page on the message path. Best effort: a kernel before 5.14 (no
 * MADV_POPULATE_*) faults them in on first use instead. */
void ucx_ext_prefault(void *p, size_t len, int write);

/* CLDEMOTE: a line this core has just written goes from its private cache to the shared one,
 * where a reader on another core finds it without a snoop of this core (for a producer's small
 * record that a consumer is waiting for, after its last store). The encoding is a hint NOP on
 * CPUs without it (Intel's SDM: "treated as a NOP"; AMD's reserved-NOP range 0F 19-1E), as
 * DPDK's rte_cldemote relies on too. */
static inline void ucx_ext_cpu_demote(const void *line)
{
#if defined(__x86_64__)
    __asm__ volatile(".byte 0x0f, 0x1c, 0x07" :: "D"(line) : "memory");   /* cldemote (%rdi) */
#else
    (void)line;
#endif
}

/* Asks for a line we are going to write, with ownership (PREFETCHW), so that the read for
 * ownership runs now, while the caller waits anyway, and not on the next message's path. x86
 * CPUs without PREFETCHW treat its encoding (0f 0d /1) as a NOP. */
static inline void ucx_ext_cpu_prefetch_own(const void *line)
{
#if defined(__x86_64__)
    __asm__ volatile("prefetchw (%0)" :: "r"(line));
#else
    __builtin_prefetch(line, 1, 3);
#endif
}

/* memcpy of a bulk copy whose two buffers the caller does not align to each other. Where the
 * destination lies 1-31 bytes past the source modulo 4 KiB, glibc's memcpy of 2 KiB-1 MiB
 * uses REP MOVSB (from its rep_movsb_threshold, 2,112 bytes with FSRM), which AMD's Zen
 * cores run about 30x slower there: 1.7-2.6 against 34-86 GB/s for 16 KiB on the project's
 * AMD EPYC VM (glibc 2.36; `perf/memcpy_alias`). Such a copy goes in 2 KiB pieces, which
 * glibc copies with vector loads and stores (10-16 GB/s in that tool, 45-58 in a loop of
 * their own); at 32-63 bytes the whole copy is the faster. The window is common, not rare:
 * malloc's large blocks start 16 bytes into a page, a transport's buffers at page or line
 * boundaries, and a copy between the two is 16 bytes off. */
#define UCX_EXT_COPY_ALIAS_WINDOW 32
#define UCX_EXT_COPY_ALIAS_PIECE  2048   /* below any rep_movsb_threshold */

static inline void ucx_ext_memcpy(void *dst, const void *src, size_t len)
{
    const uintptr_t delta = ((uintptr_t)dst - (uintptr_t)src) & 4095;
    char *d               = (char*)dst;
    const char *s         = (const char*)src;
    size_t n;

    if ((len <= UCX_EXT_COPY_ALIAS_PIECE) || (delta == 0) ||
        (delta >= UCX_EXT_COPY_ALIAS_WINDOW)) {
        memcpy(dst, src, len);
        return;
    }
    for (; len != 0; d += n, s += n, len -= n) {
        n = (len < UCX_EXT_COPY_ALIAS_PIECE) ? len : UCX_EXT_COPY_ALIAS_PIECE;
        memcpy(d, s, n);
    }
}

/* Copies len <= 32 bytes inline: two loads and two stores of one width, overlapping where
 * len is not a multiple of it. A short message's payload is a few bytes whose length the
 * compiler does not know, and there the call to glibc's memcpy (its dispatch, then the copy)
 * took more instructions than the rest of the send (callgrind: 18 of 109 in unimem's
 * am_short); every instruction from a message's arrival to its answer is latency. */
static inline void ucx_ext_copy_small(void *dst, const void *src, size_t len)
{
    char *d       = (char*)dst;
    const char *s = (const char*)src;
    uint64_t a, b;
    uint32_t x, y;

    if (len >= 16) {
        char head[16], tail[16];

        memcpy(head, s, 16);
        memcpy(tail, s + len - 16, 16);
        memcpy(d, head, 16);
        memcpy(d + len - 16, tail, 16);
    } else if (len >= 8) {
        memcpy(&a, s, 8);
        memcpy(&b, s + len - 8, 8);
        memcpy(d, &a, 8);
        memcpy(d + len - 8, &b, 8);
    } else if (len >= 4) {
        memcpy(&x, s, 4);
        memcpy(&y, s + len - 4, 4);
        memcpy(d, &x, 4);
        memcpy(d + len - 4, &y, 4);
    } else if (len > 0) {
        d[0]       = s[0];
        d[len / 2] = s[len / 2];
        d[len - 1] = s[len - 1];
    }
}

/* CLOCK_MONOTONIC in ns (the vDSO's: no system call where the clock source is the TSC). */
static inline uint64_t ucx_ext_now_ns(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* A cheap cycle count for comparing the costs of two ways of a copy on one machine (the TSC
 * on x86, which the VM's ns clock reads anyway; elsewhere ns): not a time. */
static inline uint64_t ucx_ext_ticks(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_ia32_rdtsc();
#else
    return ucx_ext_now_ns();
#endif
}

/* Reads (write == 0) or writes len bytes at remote_addr in process pid from/to the local
 * iovec list, which it advances. 0, or -errno (-EFAULT for a transfer that made no progress,
 * -EINVAL if the local list is shorter than len). */
int ucx_ext_process_vm(pid_t pid, struct iovec *local, size_t cnt, uint64_t remote_addr,
                       size_t len, int write);

/* Opens (creating it, mode 0400, when it does not exist) a file that lives in a directory
 * other users can write (/dev/shm) and that must be ours alone: not a symbolic link
 * (O_NOFOLLOW), a regular file owned by our effective user, writable by nobody else. Another
 * user who created it first would otherwise share what it names or deny it. The descriptor,
 * or -errno with why (a sentence, why_len bytes) saying what was wrong: -ELOOP a link,
 * -EPERM another owner or mode, -EINVAL not a regular file. */
int ucx_ext_open_own_file(const char *path, char *why, size_t why_len);

/* This process's pid without a system call (glibc's getpid is one): the hot paths name
 * themselves in every rkey they pack or unpack. Kept right across fork (the child's
 * first call after it asks again). */
pid_t ucx_ext_getpid(void);

/* The start time of process pid (field 22 of /proc/<pid>/stat), 0 if it has none. */
unsigned long long ucx_ext_proc_start_time(pid_t pid);

/* 1 if pid is running (not a zombie) with that start time; 1 also if its stat cannot be
 * parsed (a peer is never failed on a parse problem); 0 otherwise. */
int ucx_ext_proc_alive(pid_t pid, unsigned long long start_time);

#ifdef __cplusplus
}
#endif

#endif
