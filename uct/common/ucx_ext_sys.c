/* Plain-C helpers shared by the shared-memory wires and HAL backends (see ucx_ext_sys.h). */

#include "ucx_ext_sys.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int ucx_ext_open_own_file(const char *path, char *why, size_t why_len)
{
    struct stat st;
    int fd, err;

    fd = open(path, O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, S_IRUSR);
    if (fd < 0) {
        err = -errno;
        snprintf(why, why_len, "%s: %s", path,
                 (err == -ELOOP) ? "a symbolic link: refused" : strerror(-err));
        return err;
    }
    err = 0;
    if (fstat(fd, &st) != 0) {
        err = -errno;
        snprintf(why, why_len, "%s: %s", path, strerror(-err));
    } else if (!S_ISREG(st.st_mode)) {
        err = -EINVAL;
        snprintf(why, why_len, "%s: not a regular file: refused", path);
    } else if (st.st_uid != geteuid()) {
        err = -EPERM;
        snprintf(why, why_len, "%s is owned by uid %u, not by us (uid %u): refused", path,
                 (unsigned)st.st_uid, (unsigned)geteuid());
    } else if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        err = -EPERM;
        snprintf(why, why_len, "%s is writable by others (mode %03o): refused", path,
                 (unsigned)(st.st_mode & 0777));
    }
    if (err != 0) {
        close(fd);
        return err;
    }
    return fd;
}

int ucx_ext_seg_create(const char *name, size_t size, int *fd_p, void **base_p)
{
    void *base;
    int fd, err;

    fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0) {
        return -errno;
    }
    if (ftruncate(fd, (off_t)size) != 0) {
        err = -errno;
        close(fd);
        return err;
    }
    base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        err = -errno;
        close(fd);
        return err;
    }
    *fd_p   = fd;
    *base_p = base;
    return 0;
}

int ucx_ext_seg_attach(pid_t pid, int fd, size_t min_size, void **base_p, size_t *size_p)
{
    return ucx_ext_seg_attach_ino(pid, fd, 0, min_size, base_p, size_p);
}

int ucx_ext_seg_attach_ino(pid_t pid, int fd, uint64_t ino, size_t min_size, void **base_p,
                           size_t *size_p)
{
    char path[64];
    struct stat st;
    void *base;
    int pfd, err;

    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, fd);
    pfd = open(path, O_RDWR | O_CLOEXEC);
    if (pfd < 0) {
        return -errno;
    }
    if (fstat(pfd, &st) != 0) {
        err = -errno;
        close(pfd);
        return err;
    }
    if ((ino != 0) && ((uint64_t)st.st_ino != ino)) {
        close(pfd);
        return -ESTALE;
    }
    if ((st.st_size <= 0) || ((size_t)st.st_size < min_size)) {
        close(pfd);
        return -EPROTO;
    }
    base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, pfd, 0);
    close(pfd);
    if (base == MAP_FAILED) {
        return -errno;
    }
    *base_p = base;
    *size_p = (size_t)st.st_size;
    return 0;
}

void ucx_ext_prefault(void *p, size_t len, int write)
{
#if defined(MADV_POPULATE_WRITE) && defined(MADV_POPULATE_READ)
    uintptr_t page  = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)p & ~(page - 1);
    uintptr_t end   = ((uintptr_t)p + len + page - 1) & ~(page - 1);

    (void)madvise((void*)start, end - start, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
#else
    (void)p;
    (void)len;
    (void)write;
#endif
}

int ucx_ext_process_vm(pid_t pid, struct iovec *local, size_t cnt, uint64_t remote_addr,
                       size_t len, int write)
{
    struct iovec remote;
    ssize_t ret;

    while (len > 0) {
        remote.iov_base = (void*)(uintptr_t)remote_addr;
        remote.iov_len  = len;
        ret = write ? process_vm_writev(pid, local, cnt, &remote, 1, 0) :
                      process_vm_readv(pid, local, cnt, &remote, 1, 0);
        if (ret <= 0) {
            if ((ret < 0) && (errno == EINTR)) {
                continue;
            }
            return (ret < 0) ? -errno : -EFAULT;
        }
        /* partial transfer: advance both sides */
        len         -= (size_t)ret;
        remote_addr += (uint64_t)ret;
        while ((ret > 0) && (cnt > 0)) {
            if ((size_t)ret >= local->iov_len) {
                ret -= (ssize_t)local->iov_len;
                ++local;
                --cnt;
            } else {
                local->iov_base = (char*)local->iov_base + ret;
                local->iov_len -= (size_t)ret;
                ret             = 0;
            }
        }
        if ((len > 0) && (cnt == 0)) {
            return -EINVAL;
        }
    }
    return 0;
}

/* Reads /proc/<pid>/stat; returns the state character (0: no such process) and the start
 * time (0 if it cannot be parsed). */
static char ucx_ext_proc_stat(pid_t pid, unsigned long long *start)
{
    char path[64], buf[1024], *p;
    ssize_t len;
    int fd, field;
    char state;

    *start = 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    len = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (len <= 0) {
        return 0;
    }
    buf[len] = '\0';
    p = strrchr(buf, ')');            /* the command name may hold spaces and parens */
    if ((p == NULL) || (p[1] != ' ') || (p[2] == '\0')) {
        return 'X';                   /* not a process's stat line */
    }
    state = p[2];
    /* state is field 3, starttime field 22 */
    for (field = 3, p += 2; (field < 22) && (p != NULL); ++field) {
        p = strchr(p, ' ');
        p = (p != NULL) ? p + 1 : NULL;
    }
    if ((p == NULL) || (sscanf(p, "%llu", start) != 1)) {
        *start = 0;
    }
    return state;
}

unsigned long long ucx_ext_proc_start_time(pid_t pid)
{
    unsigned long long start;

    (void)ucx_ext_proc_stat(pid, &start);
    return start;
}

int ucx_ext_proc_alive(pid_t pid, unsigned long long start_time)
{
    unsigned long long start;
    char state = ucx_ext_proc_stat(pid, &start);

    if ((state == 0) || (state == 'Z') || (state == 'X')) {
        return 0;   /* gone, or killed and not reaped yet */
    }
    if (start == 0) {
        return 1;   /* no start time: do not fail a peer on a parse problem */
    }
    return start == start_time;
}

static pid_t ucx_ext_pid_cache;

static void ucx_ext_pid_forget(void)
{
    __atomic_store_n(&ucx_ext_pid_cache, 0, __ATOMIC_RELAXED);
}

static void ucx_ext_pid_watch_fork(void)
{
    (void)pthread_atfork(NULL, NULL, ucx_ext_pid_forget);
}

pid_t ucx_ext_getpid(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pid_t pid = __atomic_load_n(&ucx_ext_pid_cache, __ATOMIC_RELAXED);

    if (__builtin_expect(pid != 0, 1)) {
        return pid;
    }
    (void)pthread_once(&once, ucx_ext_pid_watch_fork);
    pid = getpid();
    __atomic_store_n(&ucx_ext_pid_cache, pid, __ATOMIC_RELAXED);
    return pid;
}
