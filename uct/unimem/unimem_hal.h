/*
 * unimem HAL: the ExaNeSt communication primitives (Psistakis et al., FORTH: UnimemMPI on ExaNeSt) as a small C interface.
 *
 * The hardware (virtualized mailbox + packetizer, user-level zDMA, SMMU protection by PDID) no
 * longer exists outside the project that built it, so the transport is written against this
 * interface. Backends:
 *   - unimem_hal_emu.c   (this tree) runs on any Linux host: mailboxes are shared-memory queues
 *                        of 32-byte slots, zDMA is process_vm_readv/writev.
 *   - a driver backend   implements the same functions over FORTH's kernel modules (attach a
 *                        virtual mailbox/packetizer, own a zDMA channel) and is selected at
 *                        link time instead of the emulation (uct/unimem/meson.build). Nothing
 *                        above this header (protocol core, UCT glue) changes.
 * No UCX type appears here.
 *
 * Model (what every backend must provide)
 * ---------------------------------------
 *  - Process context: one per process (unimem_hal_open is reference counted). It carries the
 *    process's protection-domain id (PDID, 1..65535): every process of a job has the same one.
 *  - Global addressing: a remote location is (process id, virtual address), unimem_gaddr_t.
 *    The process id is the "node/process" routing part (emulation: the Linux pid; hardware: the
 *    8 routing bits + the process's context, as the driver reports it).
 *  - Mailboxes: a process attaches up to UNIMEM_HAL_MAX_MBOX (64) virtual mailboxes. A mailbox
 *    receives 256-bit (32-byte) messages; each message is delivered whole (atomically) and the
 *    messages of one sender arrive in the order it sent them. Senders reach a mailbox through a
 *    destination handle resolved from its address (unimem_hal_mbox_addr_t): that is where the
 *    PDID is checked - a destination in another protection domain is refused (-EACCES), as the
 *    receiving NI refuses a transaction whose PDID selects no SMMU context bank of the process.
 *    Sending is all-or-nothing for a group of messages (a packetizer burst): either all n
 *    messages are accepted (in order, each published atomically) or none is (-EAGAIN: mailbox
 *    full; the sender retries later). A driver without admission control implements this with
 *    sender-side credits.
 *  - Remote stores: a process may map a peer's exported memory (Unimem's global address space;
 *    the emulation: a shared memfd, ucx_ext_xmem.h) and store into it. unimem_hal_send orders
 *    every store the sender made before it ahead of the messages it sends (the emulation: the
 *    sequence word's release store; hardware: a store barrier before the packetizer), so a
 *    mailbox message can announce data stored just before it (the LAND of unimem_proto.h).
 *  - zDMA: user-level read/write between local and remote virtual addresses, zero copy, no
 *    pinning. A process owns up to UNIMEM_HAL_MAX_ZDMA (8) channels (exclusive: a channel is
 *    never shared between processes). A transfer is posted with a ticket; tickets of one channel
 *    complete in order, and unimem_hal_zdma_completed() tells the highest completed ticket
 *    (flush = wait until it reaches the last posted one). A transfer whose target process has
 *    another PDID is refused with -EACCES and moves no byte.
 *
 * Threading: a mailbox has one receiving thread; any number of threads and processes may send
 * to it concurrently. A zDMA channel may be posted to by several threads (ifaces of one
 * process share channels once it owns all 8): tickets are taken atomically, and each thread
 * waits only for its own.
 * Hot paths (send, recv, zDMA post) allocate nothing and take no lock; the emulation's send and
 * recv make no system call.
 */
#ifndef UNIMEM_HAL_H
#define UNIMEM_HAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define UNIMEM_HAL_MSG_SIZE  32   /* one mailbox message: 256 bits */
#define UNIMEM_HAL_MAX_MBOX  64   /* virtual mailboxes per process */
#define UNIMEM_HAL_MAX_ZDMA  8    /* zDMA channels per process */
#define UNIMEM_HAL_PDID_MAX  0xffffu

typedef struct unimem_msg {
    uint8_t b[UNIMEM_HAL_MSG_SIZE];
} __attribute__((aligned(8))) unimem_msg_t;

/* A global address: the remote process and a virtual address in it. */
typedef struct unimem_gaddr {
    uint32_t proc;
    uint64_t vaddr;
} unimem_gaddr_t;

/* How senders reach a mailbox (exchanged out of band, e.g. in the UCT iface address). */
typedef struct unimem_hal_mbox_addr {
    uint32_t proc;       /* process id of the mailbox's owner */
    uint16_t pdid;       /* its protection domain (checked again on resolve) */
    uint8_t  index;      /* mailbox index in that process, 0..63 */
    uint8_t  reserved;
    int32_t  token;      /* backend-specific (emulation: memfd number in the owner) */
    uint64_t cookie;     /* backend-specific (emulation: random id of the mailbox instance) */
} __attribute__((packed)) unimem_hal_mbox_addr_t;

typedef struct unimem_hal      unimem_hal_t;       /* the process context */
typedef struct unimem_hal_mbox unimem_hal_mbox_t;  /* a mailbox this process receives on */
typedef struct unimem_hal_dest unimem_hal_dest_t;  /* a resolved remote mailbox (+ its process) */
typedef struct unimem_hal_zdma unimem_hal_zdma_t;  /* a zDMA channel this process owns */

/* ---- process context ---- */

/* Opens (or references) this process's context with protection domain pdid (1..65535). All
 * opens of one process must name the same PDID (-EINVAL otherwise). Returns 0 or -errno. */
int  unimem_hal_open(uint32_t pdid, unimem_hal_t **hal_p);
void unimem_hal_close(unimem_hal_t *hal);
uint32_t unimem_hal_pdid(const unimem_hal_t *hal);
uint32_t unimem_hal_proc_id(const unimem_hal_t *hal);
/* Device name for the UCT resource list (emulation: "emu0"). */
const char *unimem_hal_device_name(void);

/* ---- mailboxes: receive side ---- */

/* Attaches a free mailbox of at least nslots message slots (a power of two, >= 2). max_senders
 * bounds the sender ids handed out for it (see unimem_hal_dest_sender_id). -ENOSPC when the
 * process already has UNIMEM_HAL_MAX_MBOX attached. */
int  unimem_hal_mbox_attach(unimem_hal_t *hal, uint32_t nslots, uint32_t max_senders,
                            unimem_hal_mbox_t **mbox_p);
void unimem_hal_mbox_detach(unimem_hal_mbox_t *mbox);
void unimem_hal_mbox_address(const unimem_hal_mbox_t *mbox, unimem_hal_mbox_addr_t *addr);

/* Receives up to max messages, in arrival order; returns how many (0: none waiting). Each
 * message is whole. Never blocks. */
unsigned unimem_hal_mbox_recv(unimem_hal_mbox_t *mbox, unimem_msg_t *msgs, unsigned max);

/* ---- mailboxes: wakeup ---- */

/* A descriptor that becomes readable when a message arrives at the armed mailbox (hardware:
 * its interrupt, as the driver exposes it; emulation: an eventfd). -1: the backend has none,
 * and the transport offers no wakeup. */
int  unimem_hal_mbox_event_fd(const unimem_hal_mbox_t *mbox);
/* Arms the mailbox: the next message raises the event fd. 0, -EBUSY when messages wait (or
 * are being written): receive them first, -ENOTSUP without an event fd. */
int  unimem_hal_mbox_arm(unimem_hal_mbox_t *mbox);
/* The receiver polls again: senders need not raise the event fd. */
void unimem_hal_mbox_disarm(unimem_hal_mbox_t *mbox);

/* ---- mailboxes: send side (the packetizer) ---- */

/* Resolves a remote mailbox: 0, -EACCES (another PDID: refused), -ESRCH/-ENOENT (no such
 * process or mailbox), -EPROTO (not a compatible mailbox). Destinations of one process context
 * are shared and reference counted. */
int  unimem_hal_dest_resolve(unimem_hal_t *hal, const unimem_hal_mbox_addr_t *addr,
                             unimem_hal_dest_t **dest_p);
void unimem_hal_dest_release(unimem_hal_dest_t *dest);
uint32_t unimem_hal_dest_proc(const unimem_hal_dest_t *dest);
/* 1 once the mailbox's owner has detached it (its process may live on): nothing reads what
 * is sent there any more. */
int  unimem_hal_dest_closed(const unimem_hal_dest_t *dest);
/* A sender id unique among the senders of that mailbox (the protocol tags fragments with it
 * so that the receiver reassembles each sender's stream apart). -ENOSPC beyond max_senders. */
int  unimem_hal_dest_sender_id(unimem_hal_dest_t *dest, uint32_t *id_p);
/* Gives an id back for another sender (after this sender's last message). */
void unimem_hal_dest_sender_id_release(unimem_hal_dest_t *dest, uint32_t id);

/* Sends n messages (1 <= n <= the mailbox's slots / 2), all or nothing: 0 or -EAGAIN (full).
 * -EACCES when the destination's PDID no longer matches. */
int  unimem_hal_send(unimem_hal_dest_t *dest, const unimem_msg_t *msgs, unsigned n);
/* 1 if n messages would be accepted now (a hint: other senders may take the room first). */
int  unimem_hal_can_send(unimem_hal_dest_t *dest, unsigned n);

/* ---- zDMA ---- */

/* Opens channel 'channel' (0..7) or, with -1, the first free one: -EBUSY when taken, -ENOSPC
 * when all are. */
int  unimem_hal_zdma_open(unimem_hal_t *hal, int channel, unimem_hal_zdma_t **ch_p);
void unimem_hal_zdma_close(unimem_hal_zdma_t *ch);

/* Posts a transfer between local (an iovec list, cnt entries, total len bytes) and the remote
 * range [remote.vaddr, +len) of the process behind dest. write: local -> remote; else remote
 * -> local. Returns 0 with *ticket set, -EACCES (PDID refused, nothing moved), -ESRCH (process
 * gone), -EFAULT (bad address), or another -errno. */
int  unimem_hal_zdma_post(unimem_hal_zdma_t *ch, unimem_hal_dest_t *dest, int write,
                          const struct iovec *local, int cnt, size_t len, uint64_t remote_vaddr,
                          uint64_t *ticket);
/* Highest ticket completed so far (tickets start at 1; 0: none). */
uint64_t unimem_hal_zdma_completed(unimem_hal_zdma_t *ch);

#ifdef __cplusplus
}
#endif

#endif
