/*
 * libFuzzer target for the unimem mailbox decoder (uct/unimem/unimem_proto.c, ExaNeSt/Unimem's
 * 256-bit mailbox messages): unimem_rx_msg_inline (a SHORT decoded in the caller, the rest by
 * unimem_rx_msg, as the glue's progress does) on arbitrary sequences of 32-byte messages - SHORT,
 * FIRST and CONT with any type, length, total, sequence number and sender id, in range or not,
 * fragments of several senders interleaved - and the sender's encoder (unimem_proto_pack) for
 * the well-formed messages among them; with a landing area (cfg bit 7), LAND and LANDI
 * messages naming any sender, slot and length, with the slots they name stored or not.
 *
 * The scene, rebuilt for every input (unimem_fuzz.h): a receiver configured as the glue does it
 * (largest message, sender table, receive budget), fed the way the glue's progress feeds it:
 * the messages go through a mailbox of the emulated HAL (unimem_hal_emu.c: packetizer groups
 * sent all or nothing, the receiver draining up to its budget into a private array and
 * decoding each copy; a full mailbox makes the sender wait for the receiver) or, by cfg,
 * straight to the decoder. Each decoded message is checked against a model of
 * unimem_proto.h's rules, kept apart from the code under test: the same deliveries (AM id,
 * length, every byte: no stale or foreign bytes in a reassembled message), nothing longer
 * than the receiver's limit, rx_corrupt moving exactly when a message is dropped, and
 * mbox_rx_msgs/rx_am/rx_bytes matching. The mailbox must hand back every message sent, whole
 * and in order. The handler scribbles over what it was given, as the glue's may. Built with
 * -fsanitize=fuzzer,address,undefined: an out-of-bounds access or UB aborts.
 */
#include "unimem_proto.h"
#include "unimem_hal.h"
#include "unimem_fuzz.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <vector>

namespace {

void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "unimem_fuzz: %s\n", what);
        abort();
    }
}

uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

/* unimem_proto.h's receive rules, written from its description. */
class Model {
  public:
    struct Part {
        bool active = false;
        uint32_t total = 0;
        uint8_t am_id = 0, next_seq = 0;
        std::vector<uint8_t> buf;
    };

    Model(uint32_t max_senders, uint32_t max_len) : parts(max_senders), max_len(max_len) {}

    /* The landing area's rules (unimem_proto.h, LAND): rings x slots; stored[] says which
     * slots a sender marked busy, pattern[] what it stored there. */
    void land(uint32_t rings, uint32_t slots)
    {
        land_rings = rings;
        land_slots = slots;
        stored.assign(rings * slots, false);
        pattern.assign(rings * slots, 0);
    }
    /* The sender stores into slot: the payload from pattern p, then the busy word. */
    void store(uint32_t slot, uint8_t p)
    {
        stored[slot]  = true;
        pattern[slot] = p;
    }

    /* Returns the corrupt count of message m; a completed message in *out (then true). */
    unsigned feed(const unimem_msg_t &m, uint8_t *am_id, std::vector<uint8_t> *out, bool *done)
    {
        uint8_t type = m.b[0] >> 5, am = m.b[0] & 0x1f;
        *done = false;
        if (type == UNIMEM_PROTO_SHORT) {
            if (m.b[1] > UNIMEM_PROTO_SHORT_MAX) {
                return 1;
            }
            out->assign(&m.b[2], &m.b[2] + m.b[1]);
            *am_id = am;
            *done  = true;
            return 0;
        }
        if ((type == UNIMEM_PROTO_LAND) || (type == UNIMEM_PROTO_LANDI)) {
            return landed(m, type, am, am_id, out, done);
        }
        if ((type != UNIMEM_PROTO_FIRST) && (type != UNIMEM_PROTO_CONT)) {
            return 1;
        }
        uint32_t sender = m.b[2] | ((uint32_t)m.b[3] << 8);
        if (sender >= parts.size()) {
            return 1;
        }
        Part &p = parts[sender];
        unsigned corrupt = 0;
        if (type == UNIMEM_PROTO_FIRST) {
            uint32_t total = le32(&m.b[4]);
            if (p.active) {
                ++corrupt;      /* the partial message is dropped */
                p.active = false;
            }
            if ((m.b[1] != 0) || (total == 0) || (total > max_len)) {
                return corrupt + 1;
            }
            uint32_t n = (total < UNIMEM_PROTO_FIRST_DATA) ? total : UNIMEM_PROTO_FIRST_DATA;
            p.buf.assign(&m.b[8], &m.b[8] + n);
            p.total    = total;
            p.am_id    = am;
            p.next_seq = 1;
            p.active   = true;
        } else {
            if (!p.active || (m.b[1] != p.next_seq) || (am != p.am_id)) {
                p.active = false;
                return 1;
            }
            uint32_t n = p.total - (uint32_t)p.buf.size();
            if (n > UNIMEM_PROTO_CONT_DATA) {
                n = UNIMEM_PROTO_CONT_DATA;
            }
            p.buf.insert(p.buf.end(), &m.b[4], &m.b[4] + n);
            p.next_seq++;
        }
        if (p.buf.size() == p.total) {
            p.active = false;
            *out     = p.buf;
            *am_id   = p.am_id;
            *done    = true;
        }
        return corrupt;
    }

    uint32_t land_rings = 0, land_slots = 0;

  private:
    unsigned landed(const unimem_msg_t &m, uint8_t type, uint8_t am, uint8_t *am_id,
                    std::vector<uint8_t> *out, bool *done)
    {
        uint32_t sender = m.b[2] | ((uint32_t)m.b[3] << 8), length = le32(&m.b[4]);
        bool inl = (type == UNIMEM_PROTO_LANDI);
        if ((land_rings == 0) || (sender >= land_rings) || (m.b[1] >= land_slots) ||
            (length > max_len) || (inl && ((length > UNIMEM_LANDI_MAX) ||
                                           (length < UNIMEM_LANDI_HEAD)))) {
            return 1;
        }
        uint32_t slot = sender * land_slots + m.b[1];
        if (!stored[slot]) {
            return 1;
        }
        stored[slot] = false;
        out->clear();
        uint32_t from = 0;
        if (inl) {
            out->assign(&m.b[8], &m.b[8] + UNIMEM_LANDI_HEAD);
            from = UNIMEM_LANDI_HEAD;
        }
        for (uint32_t i = 0; from + i < length; ++i) {
            out->push_back(slot_byte(pattern[slot], i));
        }
        *am_id = am;
        *done  = true;
        return 0;
    }

  public:
    /* byte i of a slot's payload stored with pattern p */
    static uint8_t slot_byte(uint8_t p, uint32_t i)
    {
        return (uint8_t)(p * 29u + i * 7u + (i >> 8));
    }

  private:
    std::vector<Part> parts;
    uint32_t max_len;
    std::vector<bool> stored;
    std::vector<uint8_t> pattern;
};

struct Scene {
    uint32_t max_len, max_senders, budget, nslots;
    bool direct;
    unimem_rx_t rx;
    unimem_rx_stats_t stats;
    Model *model;
    std::vector<uint8_t> land;          /* the landing area, exactly sized (ASan) */
    size_t slot_size;
    std::vector<std::vector<uint8_t>> got;
    std::vector<uint8_t> got_am;
    uint64_t sink;
    /* the emulated mailbox */
    unimem_hal_t *hal;
    unimem_hal_mbox_t *mbox;
    unimem_hal_dest_t *dest;
    unimem_msg_t *rx_msgs;              /* the receiver's private array, budget entries */
    std::deque<unimem_msg_t> in_flight; /* sent, not yet received */
    std::vector<unimem_msg_t> group;    /* the packetizer group being built */
    std::deque<unimem_msg_t> lanes[UNIMEMF_LANES];
    size_t queued;
};

/* The ring the first LAND into it names must lie inside the area (unimem_rx_land_prefault),
 * whatever the message said. */
std::vector<uint8_t> *f_land_area;
void f_land_new(uint8_t *ring, size_t len)
{
    if ((ring < f_land_area->data()) || (len > f_land_area->size()) ||
        (ring + len > f_land_area->data() + f_land_area->size())) {
        abort();
    }
}

void f_deliver(void *arg, uint8_t am_id, void *data, uint32_t length)
{
    Scene *s   = (Scene*)arg;
    uint8_t *d = (uint8_t*)data;
    check(length <= ((s->max_len > UNIMEM_PROTO_SHORT_MAX) ? s->max_len : UNIMEM_PROTO_SHORT_MAX),
          "delivered a message beyond the receiver's limit");
    check(am_id < UNIMEM_PROTO_AM_ID_MAX, "delivered an AM id beyond 31");
    s->got.emplace_back(d, d + length);
    s->got_am.push_back(am_id);
    for (uint32_t i = 0; i < length; ++i) {
        s->sink += d[i];
    }
    memset(data, 0xee, length);   /* the handler may scribble: nothing may depend on it */
}

/* A sender's stores before its LAND: the slot m names (if it exists) gets the payload of
 * pattern m.b[31] and its busy word; the model learns the same. */
void store_slot(Scene *s, const unimem_msg_t &m)
{
    uint32_t sender = m.b[2] | ((uint32_t)m.b[3] << 8);
    if (s->land.empty() || (sender >= s->model->land_rings) ||
        (m.b[1] >= s->model->land_slots)) {
        return;
    }
    uint32_t slot = sender * s->model->land_slots + m.b[1];
    uint8_t *p    = s->land.data() + slot * s->slot_size;
    for (uint32_t i = 0; i < s->slot_size - UNIMEM_LAND_HDR; ++i) {
        p[UNIMEM_LAND_HDR + i] = Model::slot_byte(m.b[31], i);
    }
    __atomic_store_n(unimem_land_busy(p), 1, __ATOMIC_RELEASE);
    s->model->store(slot, m.b[31]);
}

/* One message as the glue decodes it (its private copy), checked against the model. */
void decode(Scene *s, unimem_msg_t m)
{
    unimem_rx_stats_t before = s->stats;
    std::vector<uint8_t> want;
    uint8_t want_am = 0;
    bool done;
    unsigned corrupt = s->model->feed(m, &want_am, &want, &done);

    s->got.clear();
    s->got_am.clear();
    unimem_rx_msg_inline(&s->rx, &m, f_deliver, s);   /* the glue's way: a SHORT inline */
    check(s->stats.msgs == before.msgs + 1, "mbox_rx_msgs did not count the message");
    check(s->stats.corrupt == before.corrupt + corrupt, "rx_corrupt differs from the rules");
    check(s->got.size() == (done ? 1u : 0u), "delivered when it should not, or not when it should");
    check(s->stats.am == before.am + s->got.size(), "rx_am differs from the deliveries");
    if (done) {
        check((s->got_am[0] == want_am) && (s->got[0] == want), "delivered other bytes");
        check(s->stats.bytes == before.bytes + want.size(), "rx_bytes differs");
    } else {
        check(s->stats.bytes == before.bytes, "rx_bytes moved without a delivery");
    }
}

/* The glue's progress: up to budget messages from the mailbox, each decoded. */
unsigned progress(Scene *s)
{
    if (s->direct) {
        return 0;
    }
    unsigned n = unimem_hal_mbox_recv(s->mbox, s->rx_msgs, s->budget);
    check(n <= s->budget, "received more than asked");
    for (unsigned i = 0; i < n; ++i) {
        check(!s->in_flight.empty() &&
              (memcmp(&s->in_flight.front(), &s->rx_msgs[i], sizeof(unimem_msg_t)) == 0),
              "the mailbox handed back another message than sent next");
        s->in_flight.pop_front();
        decode(s, s->rx_msgs[i]);
    }
    return n;
}

/* A packetizer group, all or nothing; a full mailbox makes the sender wait for the receiver. */
void send(Scene *s, const unimem_msg_t *msgs, unsigned n)
{
    if (s->direct) {
        for (unsigned i = 0; i < n; ++i) {
            decode(s, msgs[i]);
        }
        return;
    }
    for (;;) {
        int can = unimem_hal_can_send(s->dest, n);
        int ret = unimem_hal_send(s->dest, msgs, n);
        if (ret == 0) {
            break;
        }
        check((ret == -EAGAIN) && !can, "send refused although there was room");
        check(progress(s) != 0, "full mailbox, but nothing to receive");
    }
    s->in_flight.insert(s->in_flight.end(), msgs, msgs + n);
}

void flush_group(Scene *s)
{
    if (!s->group.empty()) {
        send(s, s->group.data(), (unsigned)s->group.size());
        s->group.clear();
    }
}

void deal(Scene *s)
{
    for (bool any = true; any;) {
        any = false;
        for (auto &lane : s->lanes) {
            if (!lane.empty()) {
                unimem_msg_t m = lane.front();
                lane.pop_front();
                send(s, &m, 1);
                any = true;
            }
        }
    }
    s->queued = 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint32_t max_lens[4] = UNIMEMF_MAX_LENS;
    static const uint32_t senders[4]  = UNIMEMF_SENDERS;
    static const uint32_t budgets[4]  = UNIMEMF_BUDGETS;
    uint8_t cfg = (size > 0) ? data[0] : 0;

    Scene *s       = new Scene();
    s->max_len     = max_lens[cfg & 3];
    s->max_senders = senders[(cfg >> 2) & 3];
    s->budget      = budgets[(cfg >> 4) & 3];
    s->direct      = (cfg >> 6) & 1;
    /* the glue's rule: the largest message's fragments fit half the mailbox (>= 64 slots) */
    s->nslots = 64;
    while (s->nslots < 2 * unimem_proto_nmsgs(s->max_len)) {
        s->nslots *= 2;
    }
    s->model = new Model(s->max_senders, s->max_len);
    if (unimem_rx_init(&s->rx, s->max_senders, s->max_len, &s->stats, f_deliver, s) != 0) {
        abort();
    }
    if (cfg & UNIMEMF_CFG_LAND) {
        uint32_t rings = (s->max_senders < UNIMEMF_LAND_RINGS) ? s->max_senders :
                         UNIMEMF_LAND_RINGS;
        s->slot_size   = unimem_land_slot_size(s->max_len);
        s->land.assign(unimem_land_area_size(rings, UNIMEMF_LAND_SLOTS, s->max_len), 0);
        unimem_rx_land(&s->rx, s->land.data(), rings, UNIMEMF_LAND_SLOTS);
        /* the first LAND into rings 0 and 1 asks for their pages: inside the area always */
        f_land_area = &s->land;
        unimem_rx_land_prefault(&s->rx, 2, f_land_new);
        s->model->land(rings, UNIMEMF_LAND_SLOTS);
    }
    if (!s->direct) {
        unimem_hal_mbox_addr_t addr;
        if ((unimem_hal_open(1, &s->hal) != 0) ||
            (unimem_hal_mbox_attach(s->hal, s->nslots, s->max_senders, &s->mbox) != 0)) {
            abort();
        }
        unimem_hal_mbox_address(s->mbox, &addr);
        if (unimem_hal_dest_resolve(s->hal, &addr, &s->dest) != 0) {
            abort();
        }
        s->rx_msgs = (unimem_msg_t*)malloc(sizeof(unimem_msg_t) * s->budget);
    }

    for (size_t off = 1; off < size; off += UNIMEMF_REC) {
        uint8_t ctl = data[off];
        unimem_msg_t m;
        memset(&m, 0, sizeof(m));
        size_t len = size - off - 1;
        memcpy(m.b, data + off + 1, (len < sizeof(m.b)) ? len : sizeof(m.b));
        uint8_t what = ctl & 3;

        if (what != UNIMEMF_RAW) {
            flush_group(s);
        }
        switch (what) {
        case UNIMEMF_RAW:
            if (ctl & UNIMEMF_STORE) {
                store_slot(s, m);
            }
            s->group.push_back(m);
            if (!(ctl & UNIMEMF_GROUP) || (s->group.size() == 32)) {
                flush_group(s);
            }
            break;
        case UNIMEMF_PACK: {
            uint16_t sender = (uint16_t)(m.b[1] | (m.b[2] << 8));
            size_t mlen     = (size_t)(m.b[3] | (m.b[4] << 8)) % (s->max_len + 1);
            std::vector<uint8_t> payload(mlen);
            for (size_t i = 0; i < mlen; ++i) {
                payload[i] = (uint8_t)(m.b[5] * 77u + i * 13u + (i >> 8));
            }
            std::vector<unimem_msg_t> msgs(unimem_proto_nmsgs(mlen));
            unsigned n = unimem_proto_pack(msgs.data(), m.b[0], sender, payload.data(), mlen);
            check(n == msgs.size(), "unimem_proto_pack: another count than unimem_proto_nmsgs");
            auto &lane = s->lanes[(ctl >> 2) & 3];
            if ((ctl & UNIMEMF_GROUP) || (s->queued + n > 4096)) {
                send(s, msgs.data(), n);
            } else {
                lane.insert(lane.end(), msgs.begin(), msgs.end());
                s->queued += n;
            }
            break;
        }
        case UNIMEMF_DEAL:
            deal(s);
            break;
        case UNIMEMF_PROGRESS:
            for (unsigned i = 0; i <= (unsigned)(m.b[0] % 4); ++i) {
                progress(s);
            }
            break;
        }
    }
    flush_group(s);
    deal(s);
    while (progress(s) != 0) {
    }
    check(s->in_flight.empty(), "the mailbox kept messages back");

    static const int verbose = getenv("UNIMEM_FUZZ_VERBOSE") != nullptr;
    if (verbose) {  /* what an input reached, e.g. to check that the seeds go deep */
        fprintf(stderr, "unimem_fuzz: %zu bytes, max_len %u, senders %u, %s:", size, s->max_len,
                s->max_senders, s->direct ? "direct" : "mailbox");
#define UNIMEMF_PRINT(_n, _v) fprintf(stderr, " %s=%llu", _n, (unsigned long long)(_v));
        UNIMEMF_PRINT("mbox_rx_msgs", s->stats.msgs) UNIMEMF_PRINT("rx_am", s->stats.am)
        UNIMEMF_PRINT("rx_bytes", s->stats.bytes) UNIMEMF_PRINT("rx_corrupt", s->stats.corrupt)
        UNIMEMF_PRINT("rx_land", s->stats.land)
        fprintf(stderr, "\n");
#undef UNIMEMF_PRINT
    }
    if (!s->direct) {
        unimem_hal_dest_release(s->dest);
        unimem_hal_mbox_detach(s->mbox);
        unimem_hal_close(s->hal);
        free(s->rx_msgs);
    }
    unimem_rx_cleanup(&s->rx);
    delete s->model;
    delete s;
    return 0;
}
