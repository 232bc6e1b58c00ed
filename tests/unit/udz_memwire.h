/*
 * An in-memory lossy datagram wire for the ud_zcopy protocol core (udz_core.h): the stand-in for
 * the UDP wire in the unit tests and the fuzzer.
 *
 * One MemNet holds N endpoints (one per core) in one process; every endpoint has a control
 * channel (0) and data channels 1..UDZ_MAX_CHANNELS. Addresses are opaque udz_addr_t built here:
 * bytes 0..3 the endpoint index, bytes 4..7 the channel (a data channel's id is its number, like
 * a UDP port). send() copies the gathered datagram into the destination channel's queue; recv()
 * dequeues and scatters into the core's iovecs exactly like recvmmsg: header iov first, then the
 * payload iov, len = the datagram's full length, trunc = 1 when it did not fit (only what fits
 * is copied), src = the sender's control address.
 *
 * It fills the whole wire table (udz_wire.h), limits as UDP's so that the core sizes its
 * receive slots as in production; the glue's part (devices, open, addresses) opens endpoints
 * on the net made current with MemNet::use().
 *
 * Impairments, per net, from a seeded PRNG (deterministic per test): loss, duplication,
 * reordering (a datagram is held back and delivered after later ones), truncation (cut short),
 * corruption (flip bytes: anywhere, or only in the header fields the decoder validates), and per
 * endpoint a "dead" switch (it neither sends nor receives), optionally answering sends to it with
 * an 'unreach' record (the UDP wire's ICMP port unreachable).
 */
#ifndef UDZ_MEMWIRE_H
#define UDZ_MEMWIRE_H

#if defined(__cplusplus) && !defined(_Static_assert)
#define _Static_assert static_assert    /* udz_proto.h is C11; this header is C++ */
#endif
#include "udz_core.h"
#include "udz_postq.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

namespace udzmem {

struct Dgram {
    std::vector<uint8_t> data;
    udz_addr_t           src;
    int                  unreach = 0;
    uint32_t             tag = 0;   /* posted mode: the immediate data */
};

struct Impair {
    double loss      = 0;   /* probability a datagram is dropped */
    double dup       = 0;   /* ... delivered twice */
    double reorder   = 0;   /* ... held back and delivered after later ones */
    double trunc     = 0;   /* ... cut short */
    double corrupt   = 0;   /* ... gets 1..3 bytes flipped */
    bool   corrupt_hdr_checked = false;  /* flip only magic/version/len/dst_cookie (detectable) */
    bool   data_only = false;  /* impair only the data channels */
    bool   ctrl_only = false;  /* impair only the control channel */
    /* a chosen datagram is lost (before the random impairments): for exact loss patterns */
    std::function<bool(const std::vector<uint8_t> &data, uint32_t chan)> drop_if;
};

struct Stats {
    uint64_t sent = 0, delivered = 0, lost = 0, dups = 0, reordered = 0, truncated = 0,
             corrupted = 0, dead_drops = 0, overflow = 0, unreach = 0, no_recv = 0, lent = 0;
};

/* A data channel of a net in posted mode (MemNet::posted): a receive queue as an InfiniBand
 * UD QP has, and its completion queue. A datagram lands when it arrives (at the sender's
 * send, or later when held back), into the oldest posted receive: its first hdr_len bytes
 * into the header area of the receive's position, the rest into the receive's payload area
 * (a bounce buffer when none was given); one that does not fit fails the receive, one that
 * finds no receive is dropped. A renew drops every posted receive and its completions. */
struct PostedRecv {
    uint32_t pos;
    uint8_t *payload;
    size_t   len;
};

struct PostedChan {
    std::deque<PostedRecv>     rq;
    std::deque<udz_postq_wc_t> cq;
    std::vector<uint8_t>       hdrs, bounces;
};

class MemNet;

struct Endpoint {
    MemNet *net;
    int     idx;
    unsigned nchan = 0;     /* data channels it was opened with (announced in its address) */
    bool    dead = false;
    struct Queue {
        std::deque<Dgram> q;
        std::vector<std::pair<Dgram, int>> held;   /* held back: delivered after n more */
    };
    Queue   chan[1 + UDZ_MAX_CHANNELS];
    /* posted mode */
    PostedChan  pchan[UDZ_MAX_CHANNELS];
    udz_postq_t pq;
    udz_wire_counters_t wcnt{};
    /* lend mode: what the last control receive lent, and how many calls there were */
    std::vector<std::vector<uint8_t>> lent;
    uint64_t lend_calls = 0;
};

class MemNet {
public:
    explicit MemNet(uint64_t seed = 1, size_t qcap = 8192) : rng_(seed ? seed : 1), qcap_(qcap) {}

    Endpoint *add() {
        eps_.emplace_back(new Endpoint());
        Endpoint *e = eps_.back().get();
        e->net = this;
        e->idx = (int)eps_.size() - 1;
        if (posted) {
            for (auto &pc : e->pchan) {
                pc.hdrs.assign((size_t)post_depth * UDZ_HDR_LEN, 0);
                pc.bounces.assign((size_t)post_depth * bounce_len, 0);
            }
            udz_postq_init(&e->pq, &pq_ops, e, post_depth, UDZ_HDR_LEN, bounce_len, &e->wcnt);
        }
        return e;
    }
    Endpoint *ep(int i) { return eps_[(size_t)i].get(); }
    size_t size() const { return eps_.size(); }

    static udz_addr_t addr(int idx, uint32_t chan = 0) {
        udz_addr_t a;
        memset(&a, 0, sizeof(a));
        memcpy(a.b, &idx, 4);
        memcpy(a.b + 4, &chan, 4);
        a.b[8] = 0xa5;
        return a;
    }
    static int addr_idx(const udz_addr_t &a) { int i; memcpy(&i, a.b, 4); return i; }
    static uint32_t addr_chan(const udz_addr_t &a) { uint32_t c; memcpy(&c, a.b + 4, 4); return c; }

    Impair  imp;
    Stats   st;
    bool    unreach_mode = false;   /* sends to a dead endpoint come back as 'unreach' */
    /* Lend mode: every other receive call on a control channel lends its datagrams in the
     * wire's own buffer (udz_wire.h recv) instead of scattering them; a lent buffer is
     * overwritten with junk at the next call, so a core that kept a lent pointer, or
     * scattered into a lent one, delivers garbage that the tests see. */
    bool    lend_mode = false;
    /* Posted mode (set before adding endpoints; open through ops_posted()): the data channels
     * take datagrams only into receives posted ahead, as InfiniBand UD does, received through
     * the wire's engine for that (udz_postq.h). */
    bool     posted     = false;
    unsigned post_depth = UDZ_POSTQ_MAX_DEPTH;
    size_t   bounce_len = 8192;
    /* What path_mtu says of every peer (0: unknown, the device's), as UDP's route lookup says
     * 65507 of a peer on this host. */
    size_t   path_mtu   = 0;
    unsigned path_asks  = 0;        /* path_mtu calls */

    /* Puts raw bytes into a channel's queue as if src had sent them (tests, fuzzer). */
    void inject(int dst, uint32_t chan, const void *p, size_t len, const udz_addr_t &src) {
        Dgram d;
        d.data.assign((const uint8_t*)p, (const uint8_t*)p + len);
        d.src = src;
        eps_[(size_t)dst]->chan[chan].q.push_back(std::move(d));
    }
    /* Puts an 'unreach' report naming about into dst's control queue, as the UDP wire turns an
     * ICMP port unreachable into one: a real one (a send to a dead endpoint in unreach_mode)
     * or a forged one, which anybody on the path can send (tests). */
    void inject_unreach(int dst, const udz_addr_t &about) {
        Dgram d;
        d.src     = about;
        d.unreach = 1;
        eps_[(size_t)dst]->chan[0].q.push_back(std::move(d));
    }
    /* Drops everything queued or held for an endpoint (a restarted process has empty sockets). */
    void clear(int idx) {
        for (auto &c : eps_[(size_t)idx]->chan) {
            c.q.clear();
            c.held.clear();
        }
    }
    /* Delivers every held-back datagram now. */
    void release_held() {
        for (auto &e : eps_) {
            for (auto &c : e->chan) {
                for (auto &h : c.held) {
                    c.q.push_back(std::move(h.first));
                }
                c.held.clear();
            }
        }
    }
    size_t queued(int idx, uint32_t chan) const {
        return eps_[(size_t)idx]->chan[chan].q.size() + eps_[(size_t)idx]->chan[chan].held.size();
    }

    uint64_t rand64() {     /* xorshift64* */
        rng_ ^= rng_ >> 12;
        rng_ ^= rng_ << 25;
        rng_ ^= rng_ >> 27;
        return rng_ * 0x2545f4914f6cdd1dull;
    }
    bool chance(double p) { return (p > 0) && ((double)(rand64() >> 11) * 0x1.0p-53 < p); }
    size_t below(size_t n) { return n ? (size_t)(rand64() % n) : 0; }

    /* ---- udz_wire_ops_t ---- */

    /* The net whose endpoints open() makes (one device, "mem"). */
    static MemNet *&current() { static MemNet *n = nullptr; return n; }
    void use() { current() = this; }

    static size_t dev_mtu_op(const char *) { return 0; }
    static int query_devices_op(int (*found)(void *, const char *), void *arg) {
        return (current() != nullptr) ? found(arg, "mem") : 0;
    }
    static int open_op(const char *dev, const udz_wire_params_t *params, void **wire_p,
                       char *err, size_t errlen) {
        if ((current() == nullptr) || strcmp(dev, "mem")) {
            snprintf(err, errlen, "no in-memory device %s", dev);
            return -ENODEV;
        }
        if ((params->channels == 0) || (params->channels > UDZ_MAX_CHANNELS)) {
            snprintf(err, errlen, "%u channels", params->channels);
            return -EINVAL;
        }
        Endpoint *e = current()->add();
        e->nchan = params->channels;
        *wire_p = e;
        return 0;
    }
    static void close_op(void *wire) {
        Endpoint *e = (Endpoint*)wire;
        e->net->clear(e->idx);
        e->dead = true;     /* like a closed socket: what comes is dropped */
    }
    static void query_op(void *wire, udz_wire_attr_t *attr) {
        Endpoint *e = (Endpoint*)wire;
        attr->rx_buffer = e->net->qcap_ * 1024;
        attr->loopback  = 0;
        snprintf(attr->desc, sizeof(attr->desc), "endpoint %d", e->idx);
    }
    /* device address: the endpoint's index; iface address: its control channel (0, 2 bytes)
     * and the count of its data channels (as UDP announces them) */
    static void dev_addr_pack_op(void *wire, void *dev_addr) {
        memcpy(dev_addr, &((Endpoint*)wire)->idx, 4);
    }
    static void iface_addr_pack_op(void *wire, void *iface_addr) {
        memset(iface_addr, 0, 4);
        ((uint8_t*)iface_addr)[2] = (uint8_t)((Endpoint*)wire)->nchan;
    }
    static void addr_unpack_op(const void *dev_addr, const void *iface_addr, udz_addr_t *out,
                               udz_chans_t *chans) {
        int idx;
        uint16_t chan;
        memcpy(&idx, dev_addr, 4);
        memcpy(&chan, iface_addr, 2);
        *out = addr(idx, chan);
        memset(chans, 0, sizeof(*chans));
        chans->b[0] = ((const uint8_t*)iface_addr)[2];
    }
    /* What an endpoint with n data channels announces (a test's udz_peer_get). */
    static udz_chans_t chans(unsigned n) {
        udz_chans_t c;
        memset(&c, 0, sizeof(c));
        c.b[0] = (uint8_t)n;
        return c;
    }
    static int is_reachable_op(void *, const void *, int) { return 1; }
    static int send_op(void *wire, const udz_addr_t *dst, const udz_txmsg_t *msgs, int n) {
        Endpoint *from = (Endpoint*)wire;
        return from->net->send(from, *dst, msgs, n);
    }
    static int recv_op(void *wire, udz_rxmsg_t *msgs, int n) {
        Endpoint *at = (Endpoint*)wire;
        return at->net->recv(at, 0, msgs, n);
    }
    /* data channel c is queue 1 + c; its id (as UDP's) is its index among those announced */
    static uint32_t chan_id_op(void *, unsigned chan) { return (uint32_t)chan; }
    static int chan_addr_op(void *, const udz_addr_t *ctrl, const udz_chans_t *chans,
                            uint32_t chan_id, udz_addr_t *out) {
        if (chan_id >= UDZ_MAX_CHANNELS) {
            return -EINVAL;
        }
        if (chans->b[0] == 0) {
            return -ENOENT;
        }
        if (chan_id >= chans->b[0]) {
            return -EINVAL;
        }
        uint32_t q = chan_id + 1;
        *out = *ctrl;
        memcpy(out->b + 4, &q, 4);
        return 0;
    }
    static size_t path_mtu_op(void *wire, const udz_addr_t *) {
        MemNet *net = ((Endpoint*)wire)->net;
        net->path_asks++;
        return net->path_mtu;
    }
    static int chan_recv_op(void *wire, unsigned chan, udz_rxmsg_t *msgs, int n) {
        Endpoint *at = (Endpoint*)wire;
        return at->net->recv(at, 1 + (int)chan, msgs, n);
    }
    static const udz_wire_ops_t *ops() {
        static const udz_wire_ops_t o = {
            "mem",
            65507, 65536, 64,       /* UDP's: the core sizes its slots as in production */
            dev_mtu_op,
            query_devices_op, open_op, close_op, query_op,
            4, 4, dev_addr_pack_op, iface_addr_pack_op, addr_unpack_op, is_reachable_op,
            send_op, recv_op,
            nullptr,   /* rx_idle: never known, every poll receives */
            chan_id_op, chan_addr_op, chan_recv_op, send_op,
            nullptr,   /* no wakeup */
            0, nullptr, nullptr,
            64, 65000,  /* coalesced sends: UDP GSO's runs */
            path_mtu_op,
            0, 0,       /* get_setup, stream_bw_share: UCP's estimates, not the core's */
        };
        return &o;
    }

    /* ---- posted mode: the data channels as InfiniBand UD QPs (udz_postq.h) ---- */

    static int chan_recv_posted_op(void *wire, unsigned chan, udz_rxmsg_t *msgs, int n) {
        Endpoint *at = (Endpoint*)wire;
        if (at->dead) {
            return 0;
        }
        at->net->land_held(at, chan);
        return udz_postq_recv(&at->pq, chan, msgs, n);
    }
    static void chan_end_op(void *wire, unsigned chan) {
        udz_postq_end(&((Endpoint*)wire)->pq, chan);
    }
    static int chan_quiet_op(void *wire, unsigned chan) {
        Endpoint *at = (Endpoint*)wire;
        if (at->dead) {
            return 1;
        }
        at->net->land_held(at, chan);
        return udz_postq_quiet(&at->pq, chan);
    }
    /* one coalesced run is one datagram: the core offers rx_batch slots, as to InfiniBand */
    static const udz_wire_ops_t *ops_posted() {
        static const udz_wire_ops_t o = {
            "mem-posted",
            65507, 1, 1,
            dev_mtu_op,
            query_devices_op, open_op, close_op, query_op,
            4, 4, dev_addr_pack_op, iface_addr_pack_op, addr_unpack_op, is_reachable_op,
            send_op, recv_op,
            nullptr,
            chan_id_op, chan_addr_op, chan_recv_posted_op, send_op,
            nullptr,
            1, chan_end_op, chan_quiet_op,
            0, 0,       /* sends datagram by datagram, as the InfiniBand UD wire */
            nullptr,    /* the path is the port's: no path_mtu */
            0, 0,
        };
        return &o;
    }
    static int pq_post(void *wire, unsigned chan, uint32_t pos, void *payload, size_t len) {
        Endpoint *e = (Endpoint*)wire;
        PostedChan &pc = e->pchan[chan];
        if (payload == nullptr) {
            payload = pc.bounces.data() + (size_t)pos * e->net->bounce_len;
            len     = e->net->bounce_len;
        }
        pc.rq.push_back(PostedRecv{pos, (uint8_t*)payload, len});
        return 0;
    }
    static int pq_poll(void *wire, unsigned chan, udz_postq_wc_t *wc, int n) {
        PostedChan &pc = ((Endpoint*)wire)->pchan[chan];
        int k = 0;
        for (; (k < n) && !pc.cq.empty(); ++k) {
            wc[k] = pc.cq.front();
            pc.cq.pop_front();
        }
        return k;
    }
    /* a new QP: what was posted is gone, and so are its completions not polled yet (the
     * channel's id stays: stale datagrams still find it, as a test of the rules) */
    static int pq_renew(void *wire, unsigned chan) {
        PostedChan &pc = ((Endpoint*)wire)->pchan[chan];
        pc.rq.clear();
        pc.cq.clear();
        return 0;
    }
    static void *pq_hdr(void *wire, unsigned chan, uint32_t pos) {
        return ((Endpoint*)wire)->pchan[chan].hdrs.data() + (size_t)pos * UDZ_HDR_LEN;
    }
    static void *pq_bounce(void *wire, unsigned chan, uint32_t pos) {
        Endpoint *e = (Endpoint*)wire;
        return e->pchan[chan].bounces.data() + (size_t)pos * e->net->bounce_len;
    }
    static constexpr udz_postq_ops_t pq_ops = {pq_post, pq_poll, pq_renew, pq_hdr, pq_bounce};

private:
    int send(Endpoint *from, const udz_addr_t &dst, const udz_txmsg_t *msgs, int n) {
        int di = addr_idx(dst);
        uint32_t ch = addr_chan(dst);

        for (int i = 0; i < n; ++i) {
            st.sent++;
            if (from->dead) {
                st.dead_drops++;
                continue;
            }
            if ((di < 0) || ((size_t)di >= eps_.size()) || (ch > UDZ_MAX_CHANNELS) ||
                (dst.b[8] != 0xa5)) {
                st.lost++;          /* nobody there */
                continue;
            }
            Endpoint *to = eps_[(size_t)di].get();
            if (to->dead) {
                st.dead_drops++;
                if (unreach_mode) {
                    Dgram u;
                    u.src = addr(di, 0);    /* the UDP wire names the dead destination */
                    u.unreach = 1;
                    from->chan[0].q.push_back(std::move(u));
                    st.unreach++;
                }
                continue;
            }
            Dgram d;
            d.src = addr(from->idx, 0);
            for (int k = 0; k < msgs[i].iovcnt; ++k) {
                const uint8_t *p = (const uint8_t*)msgs[i].iov[k].iov_base;
                d.data.insert(d.data.end(), p, p + msgs[i].iov[k].iov_len);
            }
            bool impair = !((imp.data_only && ch == 0) || (imp.ctrl_only && ch != 0));
            if (imp.drop_if && imp.drop_if(d.data, ch)) {
                st.lost++;
                continue;
            }
            if (impair && chance(imp.loss)) {
                st.lost++;
                continue;
            }
            if (impair && chance(imp.trunc) && !d.data.empty()) {
                d.data.resize(below(d.data.size()));
                st.truncated++;
            }
            if (impair && chance(imp.corrupt) && !d.data.empty()) {
                corrupt(d.data);
                st.corrupted++;
            }
            int copies = (impair && chance(imp.dup)) ? 2 : 1;
            if (copies == 2) {
                st.dups++;
            }
            d.tag = msgs[i].tag;
            for (int c = 0; c < copies; ++c) {
                Dgram dd = (c + 1 < copies) ? d : std::move(d);
                enqueue(to->chan[ch], std::move(dd), impair && chance(imp.reorder));
            }
            if (posted && (ch > 0)) {
                land_queued(to, ch - 1);    /* the HCA places it now, not when polled */
            }
        }
        return n;   /* like a UDP socket: what went into the network counts as sent */
    }

    void corrupt(std::vector<uint8_t> &b) {
        /* bytes whose damage the decoder must detect: magic, version, len, dst_cookie */
        static const int checked[] = {0, 1, 2, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
        int flips = 1 + (int)below(3);
        for (int f = 0; f < flips; ++f) {
            size_t at;
            if (imp.corrupt_hdr_checked) {
                at = (size_t)checked[below(sizeof(checked) / sizeof(checked[0]))];
                if (at >= b.size()) {
                    continue;
                }
            } else {
                at = below(b.size());
            }
            b[at] ^= (uint8_t)(1u << below(8));
        }
    }

    void enqueue(Endpoint::Queue &q, Dgram d, bool hold) {
        /* everything held ages by one datagram; the ripe ones go after this one */
        std::vector<Dgram> ripe;
        for (size_t i = 0; i < q.held.size();) {
            if (--q.held[i].second <= 0) {
                ripe.push_back(std::move(q.held[i].first));
                q.held.erase(q.held.begin() + (long)i);
            } else {
                ++i;
            }
        }
        if (hold) {
            st.reordered++;
            q.held.emplace_back(std::move(d), 1 + (int)below(8));
        } else if (q.q.size() < qcap_) {
            q.q.push_back(std::move(d));
        } else {
            st.overflow++;      /* the socket buffer is full */
        }
        for (auto &r : ripe) {
            if (q.q.size() < qcap_) {
                q.q.push_back(std::move(r));
            }
        }
    }

    int recv(Endpoint *at, int chan, udz_rxmsg_t *msgs, int n) {
        Endpoint::Queue &q = at->chan[chan];
        int got = 0;
        bool lend = false;

        if (lend_mode && (chan == 0)) {
            for (auto &b : at->lent) {
                std::fill(b.begin(), b.end(), (uint8_t)0xdb);   /* valid until this call */
            }
            at->lent.clear();
            lend = ((at->lend_calls++ & 1) != 0);
        }

        if (at->dead) {
            q.q.clear();
            q.held.clear();
            return 0;
        }
        if (q.q.empty() && !q.held.empty()) {
            /* nothing else came: what was held back arrives now, late */
            for (auto &h : q.held) {
                q.q.push_back(std::move(h.first));
            }
            q.held.clear();
        }
        while ((got < n) && !q.q.empty()) {
            Dgram d = std::move(q.q.front());
            q.q.pop_front();
            udz_rxmsg_t &m = msgs[got++];
            m.src = d.src;
            m.unreach = d.unreach;
            m.len = d.data.size();
            m.trunc = 0;
            if (d.unreach) {
                m.len = 0;
                continue;
            }
            if (lend) {
                at->lent.push_back(d.data);
                size_t room = m.iov[0].iov_len + m.iov[1].iov_len;
                m.iov[0].iov_base = at->lent.back().data();
                m.iov[0].iov_len  = (d.data.size() < room) ? d.data.size() : room;
                m.len   = m.iov[0].iov_len;
                m.trunc = d.data.size() > room;
                st.delivered++;
                st.lent++;
                continue;
            }
            size_t off = 0;
            for (int k = 0; k < 2; ++k) {
                size_t take = d.data.size() - off;
                if (take > m.iov[k].iov_len) {
                    take = m.iov[k].iov_len;
                }
                if (take > 0) {
                    memcpy(m.iov[k].iov_base, d.data.data() + off, take);
                }
                off += take;
            }
            m.trunc = off < d.data.size();
            st.delivered++;
        }
        return got;
    }

    /* Posted mode: what reached a data channel's queue lands in its posted receives. */
    void land_queued(Endpoint *at, unsigned chan) {
        Endpoint::Queue &q = at->chan[1 + chan];
        while (!q.q.empty()) {
            land(at, chan, q.q.front());
            q.q.pop_front();
        }
    }
    void land_held(Endpoint *at, unsigned chan) {
        Endpoint::Queue &q = at->chan[1 + chan];
        if (q.q.empty() && !q.held.empty()) {
            for (auto &h : q.held) {
                q.q.push_back(std::move(h.first));
            }
            q.held.clear();
        }
        land_queued(at, chan);
    }
    void land(Endpoint *at, unsigned chan, const Dgram &d) {
        PostedChan &pc = at->pchan[chan];
        if (pc.rq.empty()) {
            st.no_recv++;       /* UD: no receive posted, dropped */
            return;
        }
        PostedRecv r = pc.rq.front();
        pc.rq.pop_front();
        udz_postq_wc_t wc{};
        wc.pos = r.pos;
        wc.src = d.src;
        wc.imm = d.tag;
        wc.len = (uint32_t)d.data.size();
        size_t hl = std::min(d.data.size(), (size_t)UDZ_HDR_LEN);
        if (d.data.size() - hl <= r.len) {
            memcpy(at->pchan[chan].hdrs.data() + (size_t)r.pos * UDZ_HDR_LEN, d.data.data(), hl);
            if (d.data.size() > hl) {
                memcpy(r.payload, d.data.data() + hl, d.data.size() - hl);
            }
            wc.ok = 1;
            st.delivered++;
        }                       /* else a local length error: the receive fails */
        pc.cq.push_back(wc);
    }

    std::vector<std::unique_ptr<Endpoint>> eps_;
    uint64_t rng_;
    size_t   qcap_;
};

}  // namespace udzmem

#endif
