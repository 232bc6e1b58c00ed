/*
 * ud_zcopy wire: what the protocol core and the UCT glue need from an unreliable datagram
 * network, as one table of operations (udz_wire_ops_t). A wire is one file that fills the table
 * (UDP: udz_udp.c with udz_udp_chan.c; the unit tests' in-memory wire: tests/unit/udz_memwire.h),
 * listed in udz_wires[] (udz_wires.c) and in meson.build's udz_wire_src. Plain C: no UCX.
 *
 * A wire instance (opened on one device) has
 *  - a control endpoint: the reliable stream, acks and zero-copy control go through it, one
 *    datagram at a time, to and from peers' control endpoints;
 *  - a pool of data channels (Koop, Sur, Panda's pool of UD QPs): a zero-copy transfer streams
 *    into one of the requester's channels, datagram by datagram, each received as a
 *    [header, chunk] pair of slots so that the payload lands in the destination buffer.
 * The core never learns what an address means: a udz_addr_t names a control endpoint and is
 * compared bytewise; a data channel is named in a ZREQ by a 32-bit id that the owner turns into
 * an address with chan_addr, checked against the channels the requester announced in the
 * address UCP exchanged (udz_chans_t), never against anything a datagram says.
 */
#ifndef UDZ_WIRE_H
#define UDZ_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define UDZ_ADDR_LEN      24
#define UDZ_MAX_CHANNELS  64
#define UDZ_MAX_IOV       4

/* A control endpoint's address (UDP: IPv4 address and port; InfiniBand UD: GID, LID and
 * QP number), opaque to the core. */
typedef struct udz_addr {
    uint8_t b[UDZ_ADDR_LEN];
} udz_addr_t;

/* The data channels a peer announced in its iface address, as the wire reads them out of it
 * (addr_unpack): opaque to the core, which keeps them in the peer's record when an ep connects
 * (udz_peer_get) and hands them to chan_addr. All zero: none announced (the peer is known from
 * its datagrams only). UDP: b[0] is the count of channels, on the ports after the control
 * port. */
#define UDZ_CHANS_LEN     4
typedef struct udz_chans {
    uint8_t b[UDZ_CHANS_LEN];
} udz_chans_t;

/* What a data channel's receive slot is (udz_rxmsg_t.kind):
 *  NONE: it predicts no datagram (room for an unexpected one), the area is the core's for
 *        this call only;
 *  SCRATCH: it predicts the datagram with its tag, the area is the core's for this call only;
 *  DEST: it predicts the datagram with its tag, and iov[1] is that datagram's destination,
 *        which stays so until a datagram is reported in a slot with this tag or the transfer
 *        ends (chan_end): a wire that posts receives ahead may leave one posted there. */
enum { UDZ_SLOT_NONE = 0, UDZ_SLOT_SCRATCH = 1, UDZ_SLOT_DEST = 2 };

/* One datagram to receive: the core supplies the areas, the wire scatters into them. */
typedef struct udz_rxmsg {
    struct iovec iov[2];    /* in: [0] header area, [1] payload area (may be empty) */
    uint32_t     tag;       /* in, data channels: the tag of the datagram this slot predicts
                             * (the chunk's, udz_txmsg_t.tag) */
    int          kind;      /* in, data channels: UDZ_SLOT_* */
    struct iovec dest;      /* in, DEST slots: the whole destination iov[1] lies in (a wire
                             * that must register memory registers it once per transfer) */
    size_t       len;       /* out: bytes the datagram had */
    int          trunc;     /* out: it did not fit into iov[0] + iov[1] */
    int          unreach;   /* out: not a datagram but the wire's report that src cannot be
                             * reached (UDP: ICMP port unreachable: no iface is there any more,
                             * or somebody forged one: the core probes the peer before it
                             * believes it) */
    udz_addr_t   src;       /* out: the sender's control address (also for data that came to
                             * a data channel: the owner sends it from its control endpoint) */
} udz_rxmsg_t;

/* One datagram to send: header + up to UDZ_MAX_IOV payload pieces. */
typedef struct udz_txmsg {
    struct iovec iov[1 + UDZ_MAX_IOV];
    int          iovcnt;
    uint32_t     tag;       /* chan_send: the datagram's tag, which the receiver's slot
                             * predicted (InfiniBand UD: the immediate data); others: 0 */
    struct iovec region;    /* chan_send: the whole source the payload lies in (a wire that
                             * must register memory registers it once); others: empty */
} udz_txmsg_t;

/* What a wire counts, for the glue's counter files (the glue zeroes them; NULL: not kept).
 * ctl_recv_calls: receive calls on the control endpoint that went to the kernel;
 * idle_polls_free: polls of an idle control endpoint answered without one (UDP: io_uring);
 * a wire that posts receives ahead (udz_postq.h): chan_zc_dgrams, data-channel datagrams
 * placed by a receive posted in their destination; chan_copy_dgrams, those received in the
 * wire's own buffer (copied by the core); chan_misplaced, datagrams that landed in another
 * chunk's destination and were moved out; chan_resyncs, channels that went back to
 * zero-copy receives after such a surprise within a transfer; chan_renews, channels renewed because a transfer
 * ended with receives posted; ud_sends: datagrams the InfiniBand UD wire posted (its
 * traffic, told apart from UDP's), ud_zc_sends those of them that went from the owner's
 * memory (a chunk, zero copy); ud_rx_errors: its receives that completed with an error
 * or without a GRH's worth of bytes (dropped, never read). */
#define UDZ_WIRE_COUNTERS(_) _(ctl_recv_calls) _(idle_polls_free) \
    _(chan_zc_dgrams) _(chan_copy_dgrams) _(chan_misplaced) _(chan_resyncs) _(chan_renews) \
    _(ud_sends) _(ud_zc_sends) _(ud_rx_errors)

typedef struct udz_wire_counters {
#define UDZ_WIRE_COUNTER_FIELD(_n) uint64_t _n;
    UDZ_WIRE_COUNTERS(UDZ_WIRE_COUNTER_FIELD)
#undef UDZ_WIRE_COUNTER_FIELD
} udz_wire_counters_t;

/* What the glue asks of a wire when it opens one. */
typedef struct udz_wire_params {
    unsigned channels;      /* data channels to open, 1..UDZ_MAX_CHANNELS */
    size_t   rx_buffer;     /* bytes each endpoint and channel may hold unread (UDP: SO_RCVBUF,
                             * as root beyond rmem_max) */
    size_t   tx_buffer;     /* bytes the control endpoint may hold unsent (UDP: SO_SNDBUF) */
    int      coalesce;      /* data channels may receive coalesced runs (UDP: GRO) */
    udz_wire_counters_t *counters;  /* where the wire counts (NULL: nowhere) */
    const void *reg_cache;  /* a wire that registers memory (InfiniBand UD): the registration
                             * cache's knobs, UCX_UD_ZCOPY_RCACHE_* (ucx_ext_rcache_config_t,
                             * uct/common/ucx_ext_md.h); NULL: UCX_UD_ZCOPY_RCACHE=n, it
                             * registers per transfer */
} udz_wire_params_t;

/* What an open wire got. */
typedef struct udz_wire_attr {
    size_t rx_buffer;       /* bytes a data channel holds unread: a transfer's window fits */
    int    loopback;        /* the device reaches this host alone (UDP: a 127/8 address): no
                             * wire between, a datagram's trip is the host's own path */
    char   desc[128];       /* for the debug log: address, buffers, offloads */
} udz_wire_attr_t;

typedef struct udz_wire_ops {
    const char *name;

    /* ---- limits ----
     * max_dgram: the largest datagram, header included (UDP: 65507 = 65535 - IP - UDP header).
     * run_bytes, run_dgrams: the largest coalesced run one chan_recv may return (UDP GRO:
     * 64 KiB, 64 datagrams); the core offers enough slots to take one whole. A wire that never
     * coalesces sets max_dgram and 1.
     * dev_mtu: the largest datagram that crosses the device whole (UDP: the interface MTU
     * less the IP and UDP headers, as a lost IP fragment loses the whole datagram); 0 when
     * unknown. */
    size_t   max_dgram;
    size_t   run_bytes;
    unsigned run_dgrams;
    size_t (*dev_mtu)(const char *dev);

    /* ---- devices and life cycle (the UCT glue) ----
     * query_devices calls found(arg, name) for every device the wire can open (UDP: every
     * network interface that is up with an IPv4 address); a non-zero return from found stops
     * the walk and is returned. open returns 0, -ENODEV (the device cannot carry this wire, as
     * UCS_ERR_NO_DEVICE) or another negative errno, with a message in err. */
    int  (*query_devices)(int (*found)(void *arg, const char *dev), void *arg);
    int  (*open)(const char *dev, const udz_wire_params_t *params, void **wire_p, char *err,
                 size_t errlen);
    void (*close)(void *wire);
    /* query fills every field of attr */
    void (*query)(void *wire, udz_wire_attr_t *attr);

    /* ---- addresses (what UCP exchanges) ----
     * The device address (dev_addr_len bytes; UDP: the IPv4 address) and the iface address
     * (iface_addr_len bytes; UDP: the control port and the count of data channels), packed by
     * the open wire; addr_unpack turns a peer's pair into its control endpoint's address and
     * the data channels it announces (chans). is_reachable: whether a peer
     * with this device address can be reached from here; same_host: the peer runs on this
     * host, in this network namespace (the glue compares host identities). */
    size_t dev_addr_len;
    size_t iface_addr_len;
    void (*dev_addr_pack)(void *wire, void *dev_addr);
    void (*iface_addr_pack)(void *wire, void *iface_addr);
    void (*addr_unpack)(const void *dev_addr, const void *iface_addr, udz_addr_t *out,
                        udz_chans_t *chans);
    int  (*is_reachable)(void *wire, const void *dev_addr, int same_host);

    /* ---- the control endpoint ----
     * send: n datagrams to the control endpoint dst. Returns how many went (0..n), or a
     * negative errno; a datagram that did not go is treated as lost (a timer resends it).
     * recv: up to n datagrams from peers, each scattered into msgs[i].iov as in chan_recv
     * (the core gives the control endpoint one area per datagram), or lent: the wire points
     * iov[0] at the whole datagram in a buffer of its own, valid until its next recv call
     * (UDP with GRO: the run it came in; no copy), and the core gives its areas again before
     * that call. Returns how many arrived (0: none now), or a negative errno. */
    int (*send)(void *wire, const udz_addr_t *dst, const udz_txmsg_t *msgs, int n);
    int (*recv)(void *wire, udz_rxmsg_t *msgs, int n);
    /* rx_idle (optional, NULL: never known): 1 when a recv now would certainly find nothing
     * and the wire knows it without a system call and without changing anything (UDP: the
     * control socket is idle and its readiness ring saw no wakeup). The glue asks it without
     * its lock, on every progress call: a stale 1 only moves a receive to the next call. */
    int (*rx_idle)(void *wire);

    /* ---- data channels (0 .. params.channels - 1) ----
     * Payload iovecs point into user memory and come without memory keys: a wire that needs
     * them (verbs: lkeys) registers that memory itself.
     * chan_id: how a peer names local channel chan in a ZREQ (UDP: its index, 0..channels-1).
     * chan_addr: the address of channel chan_id of the peer whose control address is ctrl and
     * whose announced channels are chans. 0; -ENOENT when chans announce none (the owner's
     * transfer waits until an ep to the peer brings its address) and chan_id could be one;
     * -EINVAL when chan_id is not one of them (or could not be, UDZ_MAX_CHANNELS) (the ZREQ is refused and counted, zreq_bad_chan): a ZREQ cannot send
     * the owner's data anywhere the requester did not announce. InfiniBand UD names a
     * channel by its QP number, which changes when a channel is renewed, so its address
     * cannot list them: there the Q_Key keeps ZDATA to ud_zcopy's own QPs, which drop what
     * does not carry their cookie.
     * chan_recv: up to n datagrams of channel chan, each scattered into its [header, chunk]
     * pair msgs[i].iov[0..1]; with coalescing, a run of equal datagrams in one call, datagram
     * i in pair i. A wire whose datagram already lies elsewhere (in a receive posted ahead)
     * copies the header into iov[0] and points iov[1] at the payload (valid during the call;
     * the core copies it where it belongs). Returns as recv. The slots are the core's prediction of the chunks to
     * come, offered with this call and valid during it only (recvmmsg, GRO): a wire whose
     * receives must be posted ahead (verbs UD) cannot leave them in the destination, where
     * a later call may already have placed the chunk they predicted.
     * chan_send: n datagrams (the chunks of one transfer, each [header, chunk]) to a peer's
     * data channel, as few sends as the wire can make of them (UDP: sendmmsg, runs of equal
     * datagrams as one GSO send). Returns as send.
     * posts_ahead: the wire's receives must be posted before the datagrams come (InfiniBand
     * UD drops what finds no receive): the core then offers a transfer's first slots before
     * it asks the owner to send (its ZREQ), and slots with keep may stay posted after the
     * call (udz_postq.h does it for such a wire).
     * chan_end (optional): the transfer on channel chan ended (done, failed or cancelled):
     * nothing may land any more in what its calls offered, as the user has the buffer back.
     * chan_quiet (optional): non-zero when chan_recv would find nothing new since its last
     * call (no datagram to report, no receive to post), so the core spares its predictions:
     * a busy channel is polled on every progress, and predicting is a loop over slots. */
    uint32_t (*chan_id)(void *wire, unsigned chan);
    int  (*chan_addr)(void *wire, const udz_addr_t *ctrl, const udz_chans_t *chans,
                      uint32_t chan_id, udz_addr_t *out);
    int (*chan_recv)(void *wire, unsigned chan, udz_rxmsg_t *msgs, int n);
    int (*chan_send)(void *wire, const udz_addr_t *dst, const udz_txmsg_t *msgs, int n);

    /* ---- wakeup ----
     * event_fd: a descriptor readable (poll, epoll) while a receive of the wire would return
     * something; the wire keeps and closes it. A negative errno when it cannot; NULL: never
     * (the transport then offers no events). UDP: an epoll set of its sockets. */
    int (*event_fd)(void *wire);

    /* ---- receives posted ahead (after the data channels' calls above they explain) ---- */
    int  posts_ahead;
    void (*chan_end)(void *wire, unsigned chan);
    int  (*chan_quiet)(void *wire, unsigned chan);

    /* ---- coalesced sends on the control endpoint ----
     * tx_run_dgrams, tx_run_bytes: how many datagrams, and how many bytes of them (headers
     * included), one send call takes down the stack as one run (UDP GSO: 64 datagrams,
     * 65000 bytes: equal datagrams, the last may be shorter). The core then holds full-size
     * stream packets to one peer back and sends them with what follows in one send call
     * (udz_stream.c, "send coalescing"). 0: the wire gains nothing from runs; the core sends
     * every stream packet at once, one per call, as before. */
    unsigned tx_run_dgrams;
    size_t   tx_run_bytes;

    /* ---- the path to one peer (optional, NULL: every peer gets the device's datagrams) ----
     * path_mtu: the largest datagram, header included, that reaches the peer whose control
     * address is dst whole, as the route to it says; 0 when unknown. It can exceed dev_mtu:
     * a peer on this host is reached through loopback whatever device it listens on (UDP:
     * IP_MTU of a socket connected there, 65535 through lo, less the IP and UDP headers). The
     * core asks once per peer, at its first zero-copy transfer, so that a get from a peer on
     * this host over an iface on a 1500-byte device moves 64 KiB datagrams, not 1,440-byte
     * ones (where the worker has no loopback iface to leave that peer to, udz_reach.c). */
    size_t (*path_mtu)(void *wire, const udz_addr_t *dst);

    /* ---- what UCP is told (optional, 0: nothing measured) ----
     * get_setup: seconds a get costs beyond the request's trip and its data at the device's
     * bandwidth (the owner's turn, the channel's first receive, the completion), as measured
     * with one get outstanding (udz_iface.c, uct_udz_iface_estimate_perf).
     * stream_bw_share: the rate of the reliable stream (active messages, puts) as a share of
     * a get's, which streams its data on a channel of its own; 0: the same. */
    double get_setup;
    double stream_bw_share;
} udz_wire_ops_t;

/* The wires built in, NULL-terminated (udz_wires.c): the glue lists their devices and opens a
 * device on the first wire that lists it. */
extern const udz_wire_ops_t *const udz_wires[];

/* The first wire that lists the device (NULL: none). */
const udz_wire_ops_t *udz_wire_find(const char *dev);

#ifdef __cplusplus
}
#endif
#endif
