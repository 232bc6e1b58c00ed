/*
 * unimem HAL, emulated backend: runs on any Linux host (see unimem_hal.h for the model).
 *
 * Mailbox = one memfd segment per attached mailbox (gone with its last mapping, so a killed
 * process leaks nothing), mapped by senders through /proc/<pid>/fd/<fd> when they resolve it.
 *
 *   page 0   header: magic, version, owner pid, PDID, geometry, cookie; then, each on its own
 *            cache line, the producers' tail and the sender-id counter
 *   page 1.. nslots slots of one cache line each: a sequence word and a 32-byte message. One
 *            line per message: the sender's store and the receiver's load of a message move
 *            one line between the cores, not a line of sequence words and a line of messages
 *            (the layout of version 4, which packed eight sequence words and two messages per
 *            line for bursts of fragments: since landing slots, a message is mostly alone).
 *
 * The queue is a bounded multi-producer, single-consumer ring (Vyukov's sequence-number
 * scheme). Slot i starts with seq = i ("free for position i"). A producer reserves positions
 * [t, t+n) by compare-and-swap on tail after checking that the slot of position t+n-1 is free
 * for this lap (the consumer frees positions in order, so the last free means all are free);
 * it then writes each message and publishes it by storing seq = pos + 1 with release
 * semantics, last. The consumer (the owner, whose read position is private) sees a message
 * when seq == head + 1 (acquire), copies it out and frees the slot with seq = head + nslots.
 * A message is thus never seen partially written, the messages of one sender are in its
 * order, and a full mailbox is seen by the sender before it reserves anything (all or
 * nothing, -EAGAIN). Compare-and-swap rather than fetch-and-add: a ticket taken by
 * fetch-and-add on a full queue could not be given back, and the sender would have to block.
 * Cost per message: one CAS per group of messages, a 32-byte copy and a release store; no
 * lock, no system call, no allocation.
 *
 * Limitation of the emulation (not of the hardware, whose packetizer is atomic): a sender
 * killed between its reservation and its publication leaves a hole that stops that mailbox.
 *
 * zDMA = process_vm_readv/writev on the target's pid (zero copy, no pinning, synchronous: a
 * ticket is complete when post returns). PDID: each mailbox header publishes its owner's PDID;
 * resolve and every send/zDMA post compare it with this process's.
 *
 * Wakeup = an eventfd per mailbox, its number in the header; a sender takes its own
 * descriptor of it at resolve (pidfd_getfd, ucx_ext_wake.h) and writes it when it finds the
 * mailbox armed. Hardware raises the mailbox's interrupt instead.
 *
 * Fault injection, for tests only: UNIMEM_EMU_SEND_RACE=N (read at the first unimem_hal_open)
 * makes every Nth send that would succeed answer -EAGAIN without sending, as if another
 * sender had taken the room between unimem_hal_can_send and unimem_hal_send. That race is
 * real (many senders share a mailbox) but too rare to meet in a test; with this the tests
 * drive the transport's stash paths on purpose (scripts/test, tier uct-unimem-race).
 */
#include "unimem_hal.h"
#include "ucx_ext_sys.h"
#include "ucx_ext_wake.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EMU_MAGIC      0x31304d454d494e55ull   /* "UNIMEM01" */
#define EMU_VERSION    5
#define EMU_PAGE       4096ul
/* after the header page: one bit per sender id in use (UNIMEM_PROTO_MAX_SENDERS ids; pages
 * beyond the ids a mailbox allows are never touched, so they cost no memory) */
#define EMU_IDS_OFF    EMU_PAGE
#define EMU_IDS_WORDS  (65536 / 64)
#define EMU_DATA_OFF   (EMU_IDS_OFF + EMU_IDS_WORDS * 8)
#define EMU_LINE       64
#define EMU_MAX_SLOTS  (1u << 20)

typedef struct emu_hdr {
    uint64_t          magic;
    uint64_t          cookie;
    uint32_t          version;
    int32_t           pid;
    uint32_t          pdid;
    uint32_t          nslots;
    uint32_t          max_senders;
    uint32_t          index;
    uint64_t          size;
    int32_t           wake_fd;           /* the owner's eventfd (wakeup), -1: none */
    char              pad0[EMU_LINE - 52];
    volatile uint64_t tail;              /* producers: next position to reserve */
    volatile uint32_t armed;             /* the owner sleeps: the producer that swaps it
                                          * back to 0 writes wake_fd (on tail's line: a
                                          * producer holds it after its CAS) */
    char              pad1[EMU_LINE - 12];
    uint32_t          reserved;
    volatile uint32_t closed;            /* set at detach: the process may live on */
    char              pad2[EMU_LINE - 8];
} emu_hdr_t;

_Static_assert(sizeof(emu_hdr_t) == 3 * EMU_LINE, "header layout");

/* A mailbox slot: its sequence word and its message on one cache line. */
typedef struct emu_slot {
    volatile uint64_t seq;
    unimem_msg_t      msg;
    char              pad[EMU_LINE - 8 - UNIMEM_HAL_MSG_SIZE];
} emu_slot_t;

_Static_assert(sizeof(emu_slot_t) == EMU_LINE, "slot layout");
_Static_assert(sizeof(unimem_msg_t) == UNIMEM_HAL_MSG_SIZE, "message layout");

struct unimem_hal {
    int               refs;
    pid_t             pid;
    uint32_t          pdid;
    uint64_t          mbox_used;         /* bitmap of attached mailbox indexes */
    uint8_t           zdma_used;         /* bitmap of owned channels */
    unimem_hal_dest_t *dests;            /* resolved destinations (shared, refcounted) */
    uint32_t          send_race;         /* UNIMEM_EMU_SEND_RACE: 0, or every Nth send fails */
    uint32_t          send_count;
};

struct unimem_hal_mbox {
    unimem_hal_t *hal;
    emu_hdr_t         *hdr;
    emu_slot_t        *slots;
    uint64_t     head;                   /* private: a peer cannot move it */
    uint64_t     mask;
    uint64_t     nslots;
    size_t       size;
    int          fd;
    int          wake_fd;                /* eventfd the owner sleeps on, -1: none */
    uint32_t     index;
    uint64_t     cookie;
};

struct unimem_hal_dest {
    unimem_hal_t      *hal;
    unimem_hal_dest_t *next;
    int               refs;
    emu_hdr_t         *hdr;
    volatile uint64_t *ids;              /* sender ids in use, a bit each */
    emu_slot_t        *slots;
    uint64_t          mask;              /* private copies of the validated geometry */
    uint64_t          nslots;
    uint32_t          max_senders;
    size_t            size;
    pid_t             pid;
    int32_t           token;
    uint64_t          cookie;
    int               wake_fd;           /* ours of the owner's eventfd, -1: none */
};

struct unimem_hal_zdma {
    unimem_hal_t *hal;
    int          channel;
    uint64_t     posted;
    uint64_t     completed;
};

static pthread_mutex_t emu_lock = PTHREAD_MUTEX_INITIALIZER;
static unimem_hal_t    emu_ctx;

/* ---- process context ---- */

static uint32_t emu_send_race(void)
{
    const char *v = getenv("UNIMEM_EMU_SEND_RACE");
    unsigned long n;
    char *end;

    if ((v == NULL) || (*v == '\0')) {
        return 0;
    }
    n = strtoul(v, &end, 10);
    if ((*end != '\0') || (n > UINT32_MAX)) {
        fprintf(stderr, "unimem emulation: UNIMEM_EMU_SEND_RACE=%s is not a count; ignored\n", v);
        return 0;
    }
    return (uint32_t)n;
}

int unimem_hal_open(uint32_t pdid, unimem_hal_t **hal_p)
{
    int ret = 0;

    if ((pdid == 0) || (pdid > UNIMEM_HAL_PDID_MAX)) {
        return -EINVAL;
    }
    pthread_mutex_lock(&emu_lock);
    if ((emu_ctx.refs > 0) && (emu_ctx.pid != getpid())) {
        /* a forked child: the parent's mailboxes and channels are not ours */
        memset(&emu_ctx, 0, sizeof(emu_ctx));
    }
    if (emu_ctx.refs == 0) {
        memset(&emu_ctx, 0, sizeof(emu_ctx));
        emu_ctx.pid  = getpid();
        emu_ctx.pdid = pdid;
        emu_ctx.send_race = emu_send_race();
        /* peers reach our memory with process_vm_readv/writev (zDMA): under Yama
         * ptrace_scope=1 that needs our consent. Without Yama this fails harmlessly. */
        (void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    } else if (emu_ctx.pdid != pdid) {
        ret = -EINVAL;   /* one process, one protection domain */
    }
    if (ret == 0) {
        ++emu_ctx.refs;
        *hal_p = &emu_ctx;
    }
    pthread_mutex_unlock(&emu_lock);
    return ret;
}

void unimem_hal_close(unimem_hal_t *hal)
{
    pthread_mutex_lock(&emu_lock);
    if (hal->refs > 0) {
        --hal->refs;
    }
    pthread_mutex_unlock(&emu_lock);
}

uint32_t unimem_hal_pdid(const unimem_hal_t *hal)
{
    return hal->pdid;
}

uint32_t unimem_hal_proc_id(const unimem_hal_t *hal)
{
    return (uint32_t)hal->pid;
}

const char *unimem_hal_device_name(void)
{
    return "emu0";
}

/* ---- mailboxes ---- */

static size_t emu_seg_size(uint64_t nslots)
{
    return EMU_DATA_OFF + nslots * sizeof(emu_slot_t);
}

static uint64_t emu_random(void)
{
    uint64_t v = 0;
    struct timespec ts;

    if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != sizeof(v)) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        v = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40);
    }
    return v | 1;
}

int unimem_hal_mbox_attach(unimem_hal_t *hal, uint32_t nslots, uint32_t max_senders,
                           unimem_hal_mbox_t **mbox_p)
{
    unimem_hal_mbox_t *mbox;
    emu_hdr_t hdr = {0};
    int index, err;
    uint64_t i;
    void *base;

    if ((nslots < 2) || (nslots > EMU_MAX_SLOTS) || (nslots & (nslots - 1)) ||
        (max_senders == 0) || (max_senders > EMU_IDS_WORDS * 64)) {
        return -EINVAL;
    }

    pthread_mutex_lock(&emu_lock);
    for (index = 0; index < UNIMEM_HAL_MAX_MBOX; ++index) {
        if (!(hal->mbox_used & (1ull << index))) {
            break;
        }
    }
    if (index == UNIMEM_HAL_MAX_MBOX) {
        pthread_mutex_unlock(&emu_lock);
        return -ENOSPC;
    }
    hal->mbox_used |= 1ull << index;
    pthread_mutex_unlock(&emu_lock);

    mbox = calloc(1, sizeof(*mbox));
    if (mbox == NULL) {
        err = -ENOMEM;
        goto err_index;
    }
    mbox->size = emu_seg_size(nslots);
    err = ucx_ext_seg_create("unimem-mbox", mbox->size, &mbox->fd, &base);
    if (err != 0) {
        goto err_free;
    }

    mbox->hal    = hal;
    mbox->hdr    = base;
    mbox->slots  = (emu_slot_t*)((char*)base + EMU_DATA_OFF);
    mbox->head   = 0;
    mbox->nslots = nslots;
    mbox->mask   = nslots - 1;
    mbox->index  = (uint32_t)index;
    mbox->cookie = emu_random();
    for (i = 0; i < nslots; ++i) {
        mbox->slots[i].seq = i;   /* free for position i */
    }

    hdr.cookie      = mbox->cookie;
    hdr.version     = EMU_VERSION;
    hdr.pid         = hal->pid;
    hdr.pdid        = hal->pdid;
    hdr.nslots      = nslots;
    hdr.max_senders = max_senders;
    hdr.index       = (uint32_t)index;
    hdr.size        = mbox->size;
    mbox->wake_fd   = ucx_ext_wake_fd_create();
    if (mbox->wake_fd < 0) {
        mbox->wake_fd = -1;   /* no wakeup: the transport then offers no events */
    }
    hdr.wake_fd     = mbox->wake_fd;
    memcpy(base, &hdr, sizeof(hdr));
    __atomic_store_n(&mbox->hdr->magic, EMU_MAGIC, __ATOMIC_RELEASE);

    *mbox_p = mbox;
    return 0;

err_free:
    free(mbox);
err_index:
    pthread_mutex_lock(&emu_lock);
    hal->mbox_used &= ~(1ull << index);
    pthread_mutex_unlock(&emu_lock);
    return err;
}

void unimem_hal_mbox_detach(unimem_hal_mbox_t *mbox)
{
    /* senders keep their own mapping: they see the mailbox closed, not a process gone */
    __atomic_store_n(&mbox->hdr->closed, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&emu_lock);
    mbox->hal->mbox_used &= ~(1ull << mbox->index);
    pthread_mutex_unlock(&emu_lock);
    munmap(mbox->hdr, mbox->size);
    close(mbox->fd);
    if (mbox->wake_fd >= 0) {
        close(mbox->wake_fd);
    }
    free(mbox);
}

void unimem_hal_mbox_address(const unimem_hal_mbox_t *mbox, unimem_hal_mbox_addr_t *addr)
{
    memset(addr, 0, sizeof(*addr));
    addr->proc   = (uint32_t)mbox->hal->pid;
    addr->pdid   = (uint16_t)mbox->hal->pdid;
    addr->index  = (uint8_t)mbox->index;
    addr->token  = mbox->fd;
    addr->cookie = mbox->cookie;
}

unsigned unimem_hal_mbox_recv(unimem_hal_mbox_t *mbox, unimem_msg_t *msgs, unsigned max)
{
    uint64_t head = mbox->head;
    uint64_t i;
    unsigned n;

    for (n = 0; n < max; ++n) {
        i = head & mbox->mask;
        if (__atomic_load_n(&mbox->slots[i].seq, __ATOMIC_ACQUIRE) != head + 1) {
            break;
        }
        memcpy(&msgs[n], &mbox->slots[i].msg, sizeof(unimem_msg_t));
        __atomic_store_n(&mbox->slots[i].seq, head + mbox->nslots, __ATOMIC_RELEASE);
        ++head;
    }
    mbox->head = head;
    return n;
}

/* ---- destinations ---- */

int unimem_hal_dest_resolve(unimem_hal_t *hal, const unimem_hal_mbox_addr_t *addr,
                            unimem_hal_dest_t **dest_p)
{
    unimem_hal_dest_t *dest;
    emu_hdr_t hdr;
    size_t size;
    void *base;
    int err;

    if (addr->pdid != hal->pdid) {
        return -EACCES;   /* refused before anything is mapped */
    }

    pthread_mutex_lock(&emu_lock);
    for (dest = hal->dests; dest != NULL; dest = dest->next) {
        if ((dest->pid == (pid_t)addr->proc) && (dest->token == addr->token) &&
            (dest->cookie == addr->cookie)) {
            if (unimem_hal_dest_closed(dest)) {
                pthread_mutex_unlock(&emu_lock);
                return -ENOENT;
            }
            ++dest->refs;
            pthread_mutex_unlock(&emu_lock);
            *dest_p = dest;
            return 0;
        }
    }
    pthread_mutex_unlock(&emu_lock);

    err = ucx_ext_seg_attach((pid_t)addr->proc, addr->token, EMU_PAGE, &base, &size);
    if (err != 0) {
        return err;
    }

    /* never trust the peer's header beyond what is checked here: private copies follow */
    memcpy(&hdr, base, sizeof(hdr));
    if ((hdr.magic != EMU_MAGIC) || (hdr.version != EMU_VERSION) ||
        (hdr.cookie != addr->cookie) || (hdr.pid != (int32_t)addr->proc) ||
        (hdr.nslots < 2) || (hdr.nslots > EMU_MAX_SLOTS) || (hdr.nslots & (hdr.nslots - 1)) ||
        (hdr.max_senders == 0) || (hdr.max_senders > EMU_IDS_WORDS * 64) ||
        (emu_seg_size(hdr.nslots) > size)) {
        munmap(base, size);
        return -EPROTO;
    }
    if (hdr.pdid != hal->pdid) {
        munmap(base, size);
        return -EACCES;
    }
    if (hdr.closed) {
        munmap(base, size);
        return -ENOENT;
    }

    dest = calloc(1, sizeof(*dest));
    if (dest == NULL) {
        munmap(base, size);
        return -ENOMEM;
    }
    dest->hal         = hal;
    dest->refs        = 1;
    dest->hdr         = base;
    dest->ids         = (volatile uint64_t*)((char*)base + EMU_IDS_OFF);
    dest->slots       = (emu_slot_t*)((char*)base + EMU_DATA_OFF);
    dest->nslots      = hdr.nslots;
    dest->mask        = hdr.nslots - 1;
    dest->max_senders = hdr.max_senders;
    dest->size        = size;
    dest->pid         = (pid_t)addr->proc;
    dest->token       = addr->token;
    dest->cookie      = addr->cookie;
    /* our own descriptor of the owner's eventfd, to wake it (-1: cannot; logged at need) */
    dest->wake_fd     = (hdr.wake_fd >= 0) ? ucx_ext_wake_fd_get(dest->pid, hdr.wake_fd) : -1;
    if (dest->wake_fd < 0) {
        dest->wake_fd = -1;
    }

    pthread_mutex_lock(&emu_lock);
    dest->next = hal->dests;
    hal->dests = dest;
    pthread_mutex_unlock(&emu_lock);
    *dest_p = dest;
    return 0;
}

void unimem_hal_dest_release(unimem_hal_dest_t *dest)
{
    unimem_hal_dest_t **p;
    int last;

    pthread_mutex_lock(&emu_lock);
    last = (--dest->refs == 0);
    if (last) {
        for (p = &dest->hal->dests; *p != NULL; p = &(*p)->next) {
            if (*p == dest) {
                *p = dest->next;
                break;
            }
        }
    }
    pthread_mutex_unlock(&emu_lock);
    if (last) {
        munmap(dest->hdr, dest->size);
        if (dest->wake_fd >= 0) {
            close(dest->wake_fd);
        }
        free(dest);
    }
}

int unimem_hal_dest_closed(const unimem_hal_dest_t *dest)
{
    return __atomic_load_n(&dest->hdr->closed, __ATOMIC_ACQUIRE) != 0;
}

uint32_t unimem_hal_dest_proc(const unimem_hal_dest_t *dest)
{
    return (uint32_t)dest->pid;
}

/* A free bit of the mailbox's id map, set by compare-and-swap: senders of every process
 * claim from the same map, and give the id back when done, so connection churn never runs out
 * of ids. The receiver keeps no state for an id between messages (each message is one
 * contiguous all-or-nothing group), so an id may pass to another sender at once. */
int unimem_hal_dest_sender_id(unimem_hal_dest_t *dest, uint32_t *id_p)
{
    uint32_t words = (dest->max_senders + 63) / 64;
    uint64_t w, bit, limit;
    uint32_t i;

    for (i = 0; i < words; ++i) {
        limit = ((i + 1) * 64 <= dest->max_senders) ? ~0ull :
                (1ull << (dest->max_senders - i * 64)) - 1;
        w     = __atomic_load_n(&dest->ids[i], __ATOMIC_RELAXED);
        while ((~w & limit) != 0) {
            bit = ~w & limit & (~(~w & limit) + 1);      /* lowest free bit */
            if (__atomic_compare_exchange_n(&dest->ids[i], &w, w | bit, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_RELAXED)) {
                *id_p = i * 64 + (uint32_t)__builtin_ctzll(bit);
                return 0;
            }
        }
    }
    return -ENOSPC;
}

void unimem_hal_dest_sender_id_release(unimem_hal_dest_t *dest, uint32_t id)
{
    if (id < dest->max_senders) {
        __atomic_fetch_and(&dest->ids[id / 64], ~(1ull << (id % 64)), __ATOMIC_RELEASE);
    }
}

/* ---- wakeup ----
 * The owner arms by setting armed, then compares tail with its head; a producer looks at armed
 * after its compare-and-swap on tail. Both sides sequentially consistent (on x86 the CAS is a
 * locked instruction anyway): either the owner sees the reservation and stays awake, or the
 * producer sees armed and wakes it. No cost to a producer but one load of a line it holds. */

static void emu_wake(unimem_hal_dest_t *dest)
{
    int ret;

    if (!__atomic_exchange_n(&dest->hdr->armed, 0, __ATOMIC_SEQ_CST)) {
        return;   /* another producer took it */
    }
    ret = (dest->wake_fd >= 0) ? ucx_ext_wake_fd_signal(dest->wake_fd) : -EBADF;
    if (ret != 0) {
        fprintf(stderr, "unimem: cannot wake pid %d: %s\n", (int)dest->pid, strerror(-ret));
    }
}

int unimem_hal_mbox_event_fd(const unimem_hal_mbox_t *mbox)
{
    return mbox->wake_fd;
}

int unimem_hal_mbox_arm(unimem_hal_mbox_t *mbox)
{
    if (mbox->wake_fd < 0) {
        return -ENOTSUP;
    }
    ucx_ext_wake_fd_drain(mbox->wake_fd);
    __atomic_store_n(&mbox->hdr->armed, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&mbox->hdr->tail, __ATOMIC_SEQ_CST) != mbox->head) {
        __atomic_store_n(&mbox->hdr->armed, 0, __ATOMIC_RELAXED);
        return -EBUSY;    /* reserved or published, not yet received */
    }
    return 0;
}

void unimem_hal_mbox_disarm(unimem_hal_mbox_t *mbox)
{
    __atomic_store_n(&mbox->hdr->armed, 0, __ATOMIC_RELAXED);
}

/* ---- the packetizer ---- */

int unimem_hal_send(unimem_hal_dest_t *dest, const unimem_msg_t *msgs, unsigned n)
{
    uint64_t t, last, seq, pos;
    unsigned i;

    if (__builtin_expect(dest->hdr->pdid != dest->hal->pdid, 0)) {
        return -EACCES;
    }
    if (__builtin_expect((n == 0) || (n > dest->nslots), 0)) {
        return -EINVAL;
    }
    if (__builtin_expect(dest->hal->send_race != 0, 0) &&
        ((__atomic_add_fetch(&dest->hal->send_count, 1, __ATOMIC_RELAXED) %
          dest->hal->send_race) == 0)) {
        return -EAGAIN;   /* fault injection: beaten to the room (see the top) */
    }

    t = __atomic_load_n(&dest->hdr->tail, __ATOMIC_RELAXED);
    for (;;) {
        last = t + n - 1;
        seq  = __atomic_load_n(&dest->slots[last & dest->mask].seq, __ATOMIC_ACQUIRE);
        if (seq == last) {
            /* free for this lap, and so is every slot before it */
            /* sequentially consistent: ordered before the load of armed below */
            if (__atomic_compare_exchange_n(&dest->hdr->tail, &t, t + n, 1, __ATOMIC_SEQ_CST,
                                            __ATOMIC_RELAXED)) {
                break;
            }
        } else if ((int64_t)(seq - last) < 0) {
            return -EAGAIN;   /* still holds a message of the previous lap: full */
        } else {
            /* a later lap's message: another sender took the slot, so tail has moved (its
             * compare-and-swap came before its seq store, which we acquired). A tail that
             * has not is a word someone else wrote into the shared mailbox: full for us,
             * rather than spinning on it for ever */
            uint64_t moved = __atomic_load_n(&dest->hdr->tail, __ATOMIC_RELAXED);

            if (moved == t) {
                return -EAGAIN;
            }
            t = moved;
        }
    }

    for (i = 0; i < n; ++i) {
        pos = (t + i) & dest->mask;
        memcpy(&dest->slots[pos].msg, &msgs[i], sizeof(unimem_msg_t));
        __atomic_store_n(&dest->slots[pos].seq, t + i + 1, __ATOMIC_RELEASE);
    }
    if (__builtin_expect(__atomic_load_n(&dest->hdr->armed, __ATOMIC_SEQ_CST) != 0, 0)) {
        emu_wake(dest);
    }
    return 0;
}

int unimem_hal_can_send(unimem_hal_dest_t *dest, unsigned n)
{
    uint64_t t    = __atomic_load_n(&dest->hdr->tail, __ATOMIC_RELAXED);
    uint64_t last = t + n - 1;
    uint64_t seq  = __atomic_load_n(&dest->slots[last & dest->mask].seq, __ATOMIC_ACQUIRE);

    return (n <= dest->nslots) && ((int64_t)(seq - last) >= 0);
}

/* ---- zDMA ---- */

int unimem_hal_zdma_open(unimem_hal_t *hal, int channel, unimem_hal_zdma_t **ch_p)
{
    unimem_hal_zdma_t *ch;
    int c;

    if (channel >= UNIMEM_HAL_MAX_ZDMA) {
        return -EINVAL;
    }
    pthread_mutex_lock(&emu_lock);
    if (channel < 0) {
        for (c = 0; (c < UNIMEM_HAL_MAX_ZDMA) && (hal->zdma_used & (1u << c)); ++c) {
        }
        if (c == UNIMEM_HAL_MAX_ZDMA) {
            pthread_mutex_unlock(&emu_lock);
            return -ENOSPC;
        }
    } else if (hal->zdma_used & (1u << channel)) {
        pthread_mutex_unlock(&emu_lock);
        return -EBUSY;
    } else {
        c = channel;
    }
    hal->zdma_used |= (uint8_t)(1u << c);
    pthread_mutex_unlock(&emu_lock);

    ch = calloc(1, sizeof(*ch));
    if (ch == NULL) {
        pthread_mutex_lock(&emu_lock);
        hal->zdma_used &= (uint8_t)~(1u << c);
        pthread_mutex_unlock(&emu_lock);
        return -ENOMEM;
    }
    ch->hal     = hal;
    ch->channel = c;
    *ch_p       = ch;
    return 0;
}

void unimem_hal_zdma_close(unimem_hal_zdma_t *ch)
{
    pthread_mutex_lock(&emu_lock);
    ch->hal->zdma_used &= (uint8_t)~(1u << ch->channel);
    pthread_mutex_unlock(&emu_lock);
    free(ch);
}

int unimem_hal_zdma_post(unimem_hal_zdma_t *ch, unimem_hal_dest_t *dest, int write,
                         const struct iovec *local, int cnt, size_t len, uint64_t remote_vaddr,
                         uint64_t *ticket)
{
    struct iovec liov[16], *lp = liov;
    uint64_t done;
    int i, ret;

    /* the target's NI would refuse a transaction of another protection domain */
    if (__builtin_expect(dest->hdr->pdid != ch->hal->pdid, 0)) {
        return -EACCES;
    }
    if ((cnt < 0) || (cnt > 16)) {
        return -EINVAL;
    }
    for (i = 0; i < cnt; ++i) {
        liov[i] = local[i];
    }

    ret = ucx_ext_process_vm(dest->pid, lp, (size_t)cnt, remote_vaddr, len, write);
    if (ret != 0) {
        return ret;
    }
    /* complete at post; the ifaces of several threads may share the channel: tickets by
     * fetch-and-add, and completed only moves forward */
    *ticket = __atomic_add_fetch(&ch->posted, 1, __ATOMIC_RELAXED);
    done    = __atomic_load_n(&ch->completed, __ATOMIC_RELAXED);
    while ((done < *ticket) &&
           !__atomic_compare_exchange_n(&ch->completed, &done, *ticket, 1, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED)) {
    }
    return 0;
}

uint64_t unimem_hal_zdma_completed(unimem_hal_zdma_t *ch)
{
    return __atomic_load_n(&ch->completed, __ATOMIC_ACQUIRE);
}
