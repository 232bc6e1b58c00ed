/*
 * ud_zcopy protocol core: reliability and zero copy over an unreliable datagram wire.
 *
 * Plain C: no sockets and no UCX. The core talks to a wire through udz_wire_ops_t (udz_wire.h:
 * the UDP wire in udz_udp.c, the InfiniBand UD wire in udz_ibud.c, an in-memory lossy wire in
 * the unit tests) and to its user (the UCT glue) through udz_user_ops_t. Time is passed in, so
 * tests can drive the timers. udz_core_int.h says how the core is split.
 *
 * Scalability (the memory argument of "MVAPICH with XRC"): the per-peer state is one udz_peer_t
 * (see udz_peer_state_bytes()), created on first contact; send buffers come from one pool per
 * core, and the zero-copy data channels are a fixed pool per core, so memory grows with traffic
 * in flight, not with the job.
 *
 * Reliability, per peer: packet sequence numbers on the reliable stream, cumulative acks
 * piggybacked on every control datagram and sent standalone after UDZ ack_every packets or a
 * delay, out-of-order packets kept (rx_reorder per core, shared by the peers) and delivered
 * once the hole before them is filled, a NAK when a gap is seen (naming the hole: the sender
 * resends that one packet, or goes back to it and resends all after it when the receiver had no
 * room to keep what came after), retransmission on a timer with exponential backoff, duplicates
 * dropped (delivery is in order, exactly once), a send window, and the peer declared failed
 * when nothing it acks for peer_timeout.
 *
 * Zero copy (Koop, Sur, Panda: zero-copy MPI over InfiniBand UD), for get: the requester takes
 * a data channel from its pool and sends a ZREQ on the reliable stream; the owner streams the
 * region as ZDATA datagrams straight from its memory (iovecs, no staging copy) to that channel;
 * the requester receives each datagram with the 32-byte header in a header buffer and the
 * payload scattered straight into the destination (it predicts the next chunk; a datagram that
 * arrives for another chunk is moved, and counted as a copy). Completion is by counting chunks;
 * ZACKs carry the cumulative chunk plus a selective ack, and the owner resends only the missing
 * chunks.
 */
#ifndef UDZ_CORE_H
#define UDZ_CORE_H

#include "udz_proto.h"
#include "udz_wire.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct udz_peer udz_peer_t;
typedef struct udz_core udz_core_t;

/* A served transfer's hold on the registration it reads (udz_ztx.c), linked by the user's
 * memory domain to that registration (mem_hold) so that deregistering it finds the transfers
 * reading it and revokes them: O(holds of that region). The md sets revoked and then waits
 * while busy; the core sets busy only while the wire reads the region (one send call) and
 * looks at revoked after setting it (both sequentially consistent: the deregistration may come
 * from another thread than the one serving, e.g. UCX's async timer). So once the md's
 * deregistration returns, nothing reads the memory again. */
typedef struct udz_mem_hold {
    struct udz_mem_hold *next, *prev;   /* the md's: the holds on one registration */
    uint64_t             region;        /* the md's: which one (0: not linked) */
    int                  revoked;       /* set by the md: deregistered, stop reading */
    int                  busy;          /* set by the core while the wire reads the region */
} udz_mem_hold_t;

typedef struct udz_user_ops {
    /* An active message, in order. data is valid during the call only. */
    void (*am)(void *user, udz_peer_t *peer, uint8_t am_id, void *data, size_t len);
    /* Resolves a remote access to [addr, addr+len) with rkey: the local pointer, or NULL to
     * refuse (wrong key, outside the registered region, deregistered). */
    void *(*mem)(void *user, uint64_t addr, uint64_t len, const uint8_t *rkey, int write);
    /* A get finished (status 0 or a negative errno). */
    void (*get_done)(void *user, void *ctx, int status);
    /* A zero-copy send (udz_send_iov) was acked (status 0), or failed/cancelled. */
    void (*send_done)(void *user, void *ctx, int status);
    /* The peer stopped answering for peer_timeout, did not answer the probes that an
     * unreachable report of the wire started, or came back as a new incarnation. */
    void (*peer_failed)(void *user, udz_peer_t *peer);
    /* Send resources were freed (window, pool, channel): retry what was refused. */
    void (*resources)(void *user);
    /* Optional: the current time in ns, read when a packet is sent between progress calls
     * (round-trip samples); NULL: the time of the last progress call. */
    uint64_t (*now)(void *user);
    /* Optional, both or neither (NULL: mem(write 0), and a deregistration does not stop a
     * transfer already being served). mem_hold resolves a read for a transfer the core serves,
     * as mem(write 0), and on success links hold to the registration until mem_unhold:
     * deregistering it sets hold->revoked (udz_mem_hold_t). mem_unhold is called once per
     * successful mem_hold, also after a revocation. */
    void *(*mem_hold)(void *user, uint64_t addr, uint64_t len, const uint8_t *rkey,
                      udz_mem_hold_t *hold);
    void (*mem_unhold)(void *user, udz_mem_hold_t *hold);
} udz_user_ops_t;

typedef struct udz_config {
    size_t   seg_size;          /* largest control datagram, header included */
    size_t   chunk_size;        /* ZDATA payload bytes */
    size_t   chunk_max;         /* ZDATA payload bytes a transfer may use when the path to its
                                 * peer carries more than chunk_size (the wire's path_mtu: a
                                 * peer on this host); 0 or chunk_size: every transfer uses
                                 * chunk_size */
    unsigned tx_window;         /* unacked reliable packets per peer */
    unsigned tx_window_min;     /* 0 or tx_window: the window is fixed. Else a peer's window
                                 * halves at every loss (go-back or repair) down to this, and
                                 * grows back by one packet per eight acked (udz_stream.c,
                                 * peer_window) */
    unsigned tx_pool;           /* send buffers per core, shared by all peers */
    unsigned ack_every;         /* standalone ack after this many unacked received packets */
    uint64_t ack_delay_ns;      /* ... or after this delay */
    uint64_t rto_ns;            /* smallest retransmission timeout (it adapts to the measured
                                 * round trip: srtt + 4 rttvar) */
    uint64_t rto_max_ns;        /* backoff cap */
    uint64_t peer_timeout_ns;   /* no progress for this long: the peer has failed */
    unsigned channels;          /* zero-copy data channels (the paper's pool of UD QPs) */
    size_t   zc_window;         /* bytes of a transfer in flight */
    size_t   zc_max;            /* largest get in one transfer (bitmap size) */
    unsigned rx_batch;          /* datagrams per receive call */
    unsigned rx_reorder;        /* out-of-order reliable packets a core keeps for the hole
                                 * before them to be filled, all peers together, each within
                                 * rx_reorder of its peer's next expected one (copies of a
                                 * segment, allocated as losses need them); 0: none kept, every
                                 * loss is a go-back of the whole window (udz_stream.c) */
    unsigned max_peers;         /* peer records alive at once (not in a process's lifetime) */
    uint64_t peer_idle_ns;      /* a record that no ep holds and that was silent this long (live
                                 * clock) is probed, and freed unless the peer answers
                                 * (udz_peer_idle_sweep in udz_peer.c); 0: never */
} udz_config_t;

/* Counters the core keeps (the glue exports them with its own). peer_state_bytes: bytes ever
 * allocated for per-peer state (peer structs + hash slots), the scalability figure; peers: how
 * many were created; zack_stuck: ZACKs a requester sent because nothing came for an RTO (the
 * owner resends the first missing chunks and probes the tail); tx_runs: send calls that took
 * several stream packets to one peer at once (send coalescing and go-back resends: one UDP GSO
 * run each), tx_coalesced: the packets that went in them; zpath_gets: gets whose chunks were
 * larger than chunk_size, as the path to the peer allows (chunk_max); window_cuts: losses
 * (go-backs, first repairs of a hole) under an adaptive send window (each halves it, down to
 * tx_window_min); icmp_hints: reports of the wire that a peer's address is unreachable (UDP:
 * ICMP port unreachable, which anyone can forge), icmp_probes: the probes they made the core
 * send (the peer fails only if none is answered: udz_peer_probe_start in udz_peer.c);
 * ztx_revoked: transfers the owner was serving when
 * their registration was deregistered (stopped, refused with ZERR); zreq_capped: ZREQs refused
 * because their peer had UDZ_ZTX_PER_PEER transfers served already (udz_ztx.c); chal_sent: address
 * challenges sent (CHAL with a chal), chal_valid: peers that echoed theirs (the owner serves a
 * peer's ZREQs only from then on), chal_wrong: echoes that did not match (forged, or of an older
 * challenge), dropped (udz_peer.c); peers_freed: records freed (failed and held by no ep: a
 * process has no lifetime limit on peers, max_peers bounds the records alive at once, peers -
 * peers_freed); rx_stranger: datagrams from an unknown address that cannot start a
 * conversation (anything but a CHAL or a reliable packet of psn 1), dropped without making a
 * record; rx_held: reliable packets not taken while the user held receives back
 * (udz_core_rx_hold), each left to its sender's window; rx_busy_acks: BUSY acks received (a
 * peer alive but not taking packets: not failed for its silence); peers_idle: records no ep holds that were silent for
 * peer_idle_ns and so were probed (freed unless the peer answered: counted in peers_freed, and
 * in timeouts as any peer that failed its probes); zreq_bad_chan: ZREQs refused
 * because their data channel is not one the requester's address announced (the wire's
 * chan_addr; also counted in zreq_refused); rx_reordered: reliable packets that came after a
 * hole, were kept (rx_reorder) and delivered once it was filled; tx_sacks: NAKs that named
 * one hole by its range (the receiver kept what came after it: the sender resends the hole);
 * rto_expiries: retransmission timers that ran out with packets unacked (each resent them:
 * udz_stream_timers); zack_stuck_gated: STUCK ZACKs an owner took as plain ones (no repair
 * beyond the gate) because they came sooner after its last repair of the transfer than an
 * honest requester paces them (duplicated or forged: udz_ztx.c ztx_stuck_due). */
#define UDZ_CORE_COUNTERS(_) \
    _(rx_am) _(rx_bytes) _(rx_corrupt) _(rx_foreign) _(rx_dup) _(rx_ooo) \
    _(rx_zcopy_bytes) _(rx_copy_bytes) _(rx_zchunks) _(rx_zstale) _(rx_zcut) \
    _(tx_packets) _(tx_acks) _(tx_naks) _(retransmit) _(retransmit_chunks) _(timeouts) \
    _(tx_eagain) _(zreq_refused) _(peers) _(peer_state_bytes) _(chan_busy) \
    _(zack_stuck) _(tx_runs) _(tx_coalesced) _(zpath_gets) _(window_cuts) \
    _(icmp_hints) _(icmp_probes) _(ztx_revoked) _(zreq_capped) \
    _(chal_sent) _(chal_valid) _(chal_wrong) _(peers_freed) _(rx_stranger) \
    _(rx_held) _(rx_busy_acks) _(zreq_bad_chan) _(peers_idle) _(rx_reordered) _(tx_sacks) \
    _(rto_expiries) _(zack_stuck_gated)

typedef struct udz_counters {
#define UDZ_COUNTER_FIELD(_n) uint64_t _n;
    UDZ_CORE_COUNTERS(UDZ_COUNTER_FIELD)
#undef UDZ_COUNTER_FIELD
} udz_counters_t;

/* Returns NULL with *err set (-EINVAL: bad config, also beyond the wire's limits; -ENOMEM). */
udz_core_t *udz_core_create(const udz_config_t *cfg, const udz_wire_ops_t *wire_ops,
                            void *wire, const udz_user_ops_t *user_ops, void *user,
                            uint64_t cookie, udz_counters_t *counters, int *err);
void udz_core_destroy(udz_core_t *core);

/* Receives, delivers, acks and runs the timers. Returns how many events it handled. */
unsigned udz_core_progress(udz_core_t *core, uint64_t now_ns);

/* Send coalescing: a stream packet of the largest payload is probably followed by more
 * fragments of the same message, so the core holds it back (on a wire with coalesced sends,
 * udz_wire.h tx_run_dgrams) and sends the held packets as one call of the wire (UDP: one GSO
 * run) with the next shorter packet, when the run is full, before anything else is sent, and at
 * every progress call. This sends what is held now: before the caller sleeps, flushes or lets
 * the application compute without calling progress. */
void udz_core_tx_flush(udz_core_t *core);
/* 1 while packets are held back (tests). */
int udz_core_tx_held(const udz_core_t *core);

/* While hold is set, reliable packets that arrive are not taken (not delivered, not acked):
 * they stay in their senders' windows, which fill, and each sender is told by a BUSY ack that
 * we are alive, so it resends later instead of failing us. The glue holds them back while its
 * application is away and what the async progress queued for it reached a budget: the bound
 * tcp gets from its socket buffer. Gets, puts' data already taken and acks go on. */
void udz_core_rx_hold(udz_core_t *core, int hold);

/* Sets the clock the send paths stamp packets with (progress sets it too). */
void udz_core_set_time(udz_core_t *core, uint64_t now_ns);

/* The peer at addr whose iface has the given cookie: found or created, and held (one hold
 * per call) until udz_peer_put. NULL if max_peers records are alive. chans: the data channels
 * the peer's address announces (the wire's addr_unpack; NULL: none), the only ones the owner
 * will send a transfer of this peer's to. */
udz_peer_t *udz_peer_get(udz_core_t *core, const udz_addr_t *addr, uint64_t cookie,
                         const udz_chans_t *chans);
/* One hold more on a record (the glue's deferred failure event), and one less: a failed
 * record that nobody holds is freed (at the next progress); the pointer is not to be used
 * after its last put. */
void udz_peer_hold(udz_peer_t *peer);
void udz_peer_put(udz_core_t *core, udz_peer_t *peer);
int udz_peer_is_failed(const udz_peer_t *peer);
/* Largest reliable payload (seg_size - header). */
size_t udz_core_max_payload(const udz_core_t *core);
/* Bytes of one peer's state (for the scalability table). */
size_t udz_peer_state_bytes(void);
/* Bytes of the peer table (the hash of peers by address) holding npeers: the resource model's
 * figure, from the rule udz_peer_create grows it by. */
size_t udz_peer_table_bytes(unsigned npeers);
/* Per-peer user pointer (the glue's, e.g. for error reporting). */
void udz_peer_set_user(udz_peer_t *peer, void *user);
void *udz_peer_user(const udz_peer_t *peer);

/* Reliable sends. Return 0; -EAGAIN (window full, pool empty: retry after resources());
 * -EPIPE (peer failed); -EMSGSIZE. */

/* Two-step send with the payload packed in place: begin returns the payload area (at most
 * udz_core_max_payload() bytes), commit sends it. One begin at a time. */
void *udz_send_begin(udz_core_t *core, udz_peer_t *peer, int *err);
int udz_send_commit(udz_core_t *core, uint8_t type, uint8_t am_id, size_t len);
void udz_send_abort(udz_core_t *core);

/* Active message copied from (hdr, iov): header bytes copied, payload sent by reference from
 * the caller's memory and send_done(ctx) called when acked (zero copy on the send side). */
int udz_send_iov(udz_core_t *core, udz_peer_t *peer, uint8_t am_id, const void *hdr,
                 size_t hdr_len, const struct iovec *iov, int iovcnt, void *ctx);

/* Put into the peer's registered memory (copied out of the datagram at the target). */
int udz_put(udz_core_t *core, udz_peer_t *peer, uint64_t raddr, const uint8_t *rkey,
            const void *buf, size_t len);
/* The same with the data sent by reference from the caller's memory; send_done(ctx) when acked. */
int udz_put_iov(udz_core_t *core, udz_peer_t *peer, uint64_t raddr, const uint8_t *rkey,
                const struct iovec *iov, int iovcnt, void *ctx);

/* Zero-copy get of [raddr, raddr+len) into buf; get_done(ctx) later. -EAGAIN: no free data
 * channel (or window): retry after resources(). */
int udz_get(udz_core_t *core, udz_peer_t *peer, void *buf, size_t len, uint64_t raddr,
            const uint8_t *rkey, void *ctx);

/* Everything sent to the peer before this call acked and every get to it done? Returns 1 when
 * so; otherwise 0 and *token identifies the point to wait for (see udz_flush_done). */
int udz_flush_done(udz_core_t *core, udz_peer_t *peer, uint64_t *token, int start);
/* Gets in flight (data channels in use), for fences. */
unsigned udz_core_gets_in_flight(const udz_core_t *core);
/* Everything sent to any peer acked and every get done. */
int udz_core_idle(const udz_core_t *core);
/* Everything sent to a live peer acked? With ask, what is held goes out and every peer that
 * owes an ack is asked for it at once (a fence across ifaces waits for them). */
int udz_core_sends_acked(udz_core_t *core, int ask);

/* 1 while a peer is being probed after an unreachable report (udz_peer.c): its probe timer
 * must run, so a worker without async progress must not sleep (udz_wakeup.c). Not part of
 * udz_core_idle: a forged report must not hold up a flush. */
int udz_core_probing(const udz_core_t *core);

/* 1 when a progress call now would do nothing: no transfer, no peer with a timer running, and
 * the wire knows that nothing arrived (its rx_idle). Changes nothing and reads no clock: the
 * glue calls it without its lock before each progress, where a stale answer only moves the
 * work to the next call. */
int udz_core_quiet(const udz_core_t *core);

/* Peer records held (live, failed or being probed): 0 when nothing could want a timer. */
unsigned udz_core_npeers(const udz_core_t *core);

/* Drops what waits on data channels no transfer uses (a late duplicate, a forged datagram),
 * which would keep the wire's event fd readable; system calls on every idle channel, so for
 * when that fd said readable. Returns the datagrams dropped. */
unsigned udz_core_drain_idle(udz_core_t *core);
/* Fails every get in flight to the peer with status (cancel). */
void udz_peer_cancel(udz_core_t *core, udz_peer_t *peer, int status);
/* Sends by reference to the peer still unacked (am_zcopy, put_zcopy) take their data in: the
 * caller's buffers are its own again and their completions are called now with 0, as the data
 * still goes, reliably. For an ep destroyed with sends in flight: UCT completes every
 * operation of an ep by the time it is destroyed, and nothing may call back later. */
void udz_peer_absorb(udz_core_t *core, udz_peer_t *peer);

#ifdef __cplusplus
}
#endif
#endif
