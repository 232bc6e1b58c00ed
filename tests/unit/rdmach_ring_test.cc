// Unit tier for the rdmach protocol core (uct/rdmach/rdmach_ring.[ch]) on in-memory wires.
// Built with AddressSanitizer: the ring sits in an allocation of exactly its size, so a decoder
// that reads past a slot or the ring end fails the test instead of passing silently.
#include "rdmach_ring.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace {

// One connection over an in-memory wire. Direct mode: the sender stores into the receiver's
// ring, as on shared memory. Post mode: the sender builds records in a shadow ring and the wire
// copies them over, as an RDMA write would (and delivers the tail the same way).
class Conn {
  public:
    Conn(uint32_t slot_size, uint32_t nslots, size_t chunk, double lazy, bool post = false)
    {
        const char *err = rdmach_geom_init(&geom, slot_size, nslots, chunk, lazy);
        EXPECT_EQ(err, nullptr) << err;
        bytes = rdmach_geom_ring_bytes(&geom);
        ring  = static_cast<uint8_t*>(calloc(1, bytes));
        ctl   = static_cast<rdmach_ring_ctl_t*>(calloc(1, sizeof(rdmach_ring_ctl_t)));
        ops   = {post ? &Conn::post_record : nullptr, post ? &Conn::post_tail : nullptr, nullptr,
                 nullptr};
        if (post) {
            shadow = static_cast<uint8_t*>(calloc(1, bytes));
        }
        rdmach_tx_init(&tx, &geom, post ? shadow : ring, ctl, &doorbell, &tail_copy, &ops,
                       this);
        rdmach_rx_init(&rx, &geom, ring, ctl, &tail_copy, &ops, this);
    }

    ~Conn()
    {
        free(ring);
        free(shadow);
        free(ctl);
    }

    // Sends one AM record; false when the ring is full.
    bool send(uint8_t am_id, const void *data, uint32_t len)
    {
        rdmach_rec_hdr_t *rec = rdmach_tx_reserve(&tx, len);
        if (rec == nullptr) {
            return false;
        }
        if (len != 0) {
            memcpy(rec + 1, data, len);
        }
        rdmach_tx_commit(&tx, rec, am_id, len);
        return true;
    }

    unsigned poll(unsigned budget = 1u << 30)
    {
        return rdmach_rx_poll(&rx, budget, &Conn::on_am, this, &stats);
    }

    static void on_am(void *arg, const rdmach_rx_t *, uint8_t am_id, void *data, uint32_t len)
    {
        auto *c = static_cast<Conn*>(arg);
        const uint8_t *p = static_cast<const uint8_t*>(data);
        c->ids.push_back(am_id);
        c->msgs.emplace_back(p, p + len);
    }

    static void post_record(void *ctx, uint32_t index, const void *rec, size_t bytes,
                            int doorbell)
    {
        auto *c = static_cast<Conn*>(ctx);
        size_t off = static_cast<size_t>(index) * c->geom.slot_size;
        EXPECT_LE(off + bytes, c->bytes);
        // payload first, the header (with its mark) last: what an in-order RDMA write gives
        memcpy(c->ring + off + RDMACH_REC_HDR_SIZE,
               static_cast<const uint8_t*>(rec) + RDMACH_REC_HDR_SIZE,
               bytes - RDMACH_REC_HDR_SIZE);
        memcpy(c->ring + off, rec, RDMACH_REC_HDR_SIZE);
        if (doorbell) {
            c->doorbell = 1;
        }
        c->posts++;
    }

    static void post_tail(void *ctx, uint64_t tail)
    {
        auto *c = static_cast<Conn*>(ctx);
        __atomic_store_n(&c->tail_copy, tail, __ATOMIC_RELEASE);
    }

    rdmach_rec_hdr_t *slot(uint32_t index)
    {
        return reinterpret_cast<rdmach_rec_hdr_t*>(ring + size_t(index) * geom.slot_size);
    }

    rdmach_geom_t geom{};
    size_t bytes = 0;
    uint8_t *ring = nullptr, *shadow = nullptr;
    rdmach_ring_ctl_t *ctl = nullptr;
    volatile uint8_t doorbell = 0;
    volatile uint64_t tail_copy = 0;
    rdmach_ring_ops_t ops{};
    rdmach_tx_t tx{};
    rdmach_rx_t rx{};
    rdmach_rx_stats_t stats{};
    std::vector<uint8_t> ids;
    std::vector<std::vector<uint8_t>> msgs;
    unsigned posts = 0;
};

std::vector<uint8_t> pattern(uint32_t seq, uint32_t len)
{
    std::vector<uint8_t> v(len);
    for (uint32_t i = 0; i < len; ++i) {
        v[i] = static_cast<uint8_t>(seq * 131 + i * 7);
    }
    return v;
}

}  // namespace

TEST(RdmachGeom, RejectsBadValuesNamingTheKnob)
{
    rdmach_geom_t g;
    EXPECT_NE(nullptr, strstr(rdmach_geom_init(&g, 100, 64, 1024, 0.25), "SLOT_SIZE"));
    EXPECT_NE(nullptr, strstr(rdmach_geom_init(&g, 64, 100, 1024, 0.25), "RING_SIZE"));
    EXPECT_NE(nullptr, strstr(rdmach_geom_init(&g, 64, 64, 16, 0.25), "CHUNK_SIZE"));
    EXPECT_NE(nullptr, strstr(rdmach_geom_init(&g, 64, 64, 1024, 0.0), "LAZY_TAIL"));
    EXPECT_NE(nullptr, strstr(rdmach_geom_init(&g, 64, 64, 1024, 1.5), "LAZY_TAIL"));
    // 16 KiB chunks need 2*257 slots of 64 B plus the lazy part: 64 slots are too few
    EXPECT_NE(nullptr, strstr(rdmach_geom_init(&g, 64, 64, 16384, 0.25), "RING_SIZE"));
    EXPECT_EQ(nullptr, rdmach_geom_init(&g, 256, 512, 16384, 0.25));
    EXPECT_EQ(65u, g.max_span);
    EXPECT_EQ(128u, g.lazy_slots);
}

TEST(RdmachRing, WrapAroundDeliversExactlyOnceInOrder)
{
    for (bool post : {false, true}) {
        Conn c(64, 64, 1000, 0.25, post);
        std::mt19937 rng(1);
        uint32_t sent = 0, delivered = 0;
        std::vector<std::vector<uint8_t>> expect;

        // many laps with sizes that force pads at the ring end
        while (sent < 5000) {
            uint32_t len = rng() % 1001;
            auto msg     = pattern(sent, len);
            if (c.send(static_cast<uint8_t>(sent % 32), msg.data(), len)) {
                expect.push_back(msg);
                ++sent;
            } else {
                ASSERT_GT(c.poll(rng() % 4 + 1), 0u) << "full ring but nothing to receive";
            }
        }
        while (c.poll() != 0) {
        }
        ASSERT_EQ(expect.size(), c.msgs.size());
        for (delivered = 0; delivered < sent; ++delivered) {
            ASSERT_EQ(expect[delivered], c.msgs[delivered]) << "message " << delivered;
            ASSERT_EQ(delivered % 32, c.ids[delivered]);
        }
        EXPECT_GT(c.tx.head / c.geom.nslots, 50u) << "the test must wrap many times";
        EXPECT_EQ(0u, c.stats.corrupt);
        EXPECT_EQ(post ? c.posts > 0 : c.posts == 0, true);
    }
}

TEST(RdmachRing, BackPressureAtFullRingNeverOverwrites)
{
    Conn c(64, 16, 100, 0.25);
    uint8_t byte = 0;
    unsigned n   = 0;

    while (c.send(1, &byte, 1)) {
        ++byte;
        ++n;
    }
    EXPECT_EQ(16u, n) << "each 1-byte record takes one slot";
    EXPECT_FALSE(rdmach_tx_has_room(&c.tx));
    EXPECT_EQ(nullptr, rdmach_tx_reserve(&c.tx, 1)) << "still full: nothing consumed";

    // consuming less than the lazy fraction returns no credit yet
    EXPECT_EQ(3u, c.poll(3));
    EXPECT_EQ(0u, c.tail_copy);
    EXPECT_FALSE(c.send(1, &byte, 1));
    // the 4th record crosses lazy_slots (16 * 0.25 = 4): credit flows back
    EXPECT_EQ(1u, c.poll(1));
    EXPECT_EQ(4u, c.tail_copy);
    EXPECT_TRUE(c.send(1, &byte, 1));
    while (c.poll() != 0) {
    }
    ASSERT_EQ(17u, c.msgs.size());
    for (unsigned i = 0; i < 17; ++i) {
        EXPECT_EQ(static_cast<uint8_t>(i), c.msgs[i][0]);
    }
}

TEST(RdmachRing, BogusCreditIsIgnoredNeverOverwritesUnread)
{
    Conn c(64, 16, 100, 0.25);
    uint8_t byte = 0;

    while (c.send(1, &byte, 1)) {
        ++byte;
    }
    // a credit ahead of what was sent, or behind what the receiver already returned, would
    // make the sender's free count wrap and overwrite unread records: the sender ignores it
    for (uint64_t bogus : {uint64_t(17), uint64_t(1) << 40, ~uint64_t(0)}) {
        __atomic_store_n(&c.tail_copy, bogus, __ATOMIC_RELEASE);
        EXPECT_FALSE(c.send(1, &byte, 1)) << "tail " << bogus;
        EXPECT_EQ(0u, c.tx.cached_tail);
    }
    __atomic_store_n(&c.tail_copy, 0, __ATOMIC_RELEASE);
    EXPECT_EQ(4u, c.poll(4));              // honest credit flows again
    EXPECT_EQ(4u, c.tail_copy);
    EXPECT_TRUE(c.send(1, &byte, 1));
    __atomic_store_n(&c.tail_copy, 2, __ATOMIC_RELEASE);   // backwards: ignored
    while (c.send(1, &byte, 1)) {
    }
    EXPECT_EQ(4u, c.tx.cached_tail);
    while (c.poll() != 0) {
    }
    ASSERT_EQ(20u, c.msgs.size()) << "16, then the 4 slots the honest credit returned";
    for (unsigned i = 0; i < 20; ++i) {
        EXPECT_EQ(static_cast<uint8_t>(i < 16 ? i : 16), c.msgs[i][0]);
    }
}

TEST(RdmachRing, LazyTailWritesOncePerFraction)
{
    Conn c(64, 256, 100, 0.25);
    uint8_t b = 7;

    for (int i = 0; i < 1024; ++i) {
        while (!c.send(2, &b, 1)) {
            c.poll();
        }
        c.poll();
    }
    // 1024 one-slot records, credit every 64: 16 tail writes, not 1024
    EXPECT_EQ(16u, c.stats.tail_updates);
    EXPECT_EQ(1024u, c.stats.msgs);
}

TEST(RdmachRing, PipelinedChunksReassembleAcrossThreads)
{
    // a large message split into chunk-size records, as UCP's multi-fragment eager protocol
    // does above am_bcopy; producer and consumer run concurrently as two processes would
    const size_t total = 4u << 20, chunk = 16384;
    Conn c(256, 256, chunk, 0.25);
    std::vector<uint8_t> src(total), dst;
    for (size_t i = 0; i < total; ++i) {
        src[i] = static_cast<uint8_t>(i * 2654435761u >> 24);
    }
    dst.reserve(total);

    std::thread producer([&] {
        for (size_t off = 0; off < total; off += chunk) {
            while (!c.send(3, &src[off], static_cast<uint32_t>(std::min(chunk, total - off)))) {
                std::this_thread::yield();
            }
        }
    });
    struct Sink {
        std::vector<uint8_t> *dst;
        static void cb(void *arg, const rdmach_rx_t *, uint8_t, void *data, uint32_t len)
        {
            auto *d = static_cast<Sink*>(arg)->dst;
            d->insert(d->end(), static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + len);
        }
    } sink{&dst};
    while (dst.size() < total) {
        if (rdmach_rx_poll(&c.rx, 4, &Sink::cb, &sink, &c.stats) == 0) {
            std::this_thread::yield();
        }
    }
    producer.join();
    EXPECT_EQ(src, dst);
    EXPECT_EQ(total / chunk, c.stats.msgs);
}

TEST(RdmachRing, CorruptHeadersAreDroppedCountedAndNeverRead)
{
    Conn c(64, 64, 1000, 0.25);
    uint8_t payload[8] = {1, 2, 3, 4, 5, 6, 7, 8};

    struct Bad {
        uint32_t length;
        uint16_t nslots;
        uint8_t type;
    } bad[] = {
        {1u << 30, 1, RDMACH_REC_AM},   // length far beyond its one slot
        {200, 1, RDMACH_REC_AM},        // length beyond the slot, within the ring
        {10, 0, RDMACH_REC_AM},         // zero span
        {10, 1000, RDMACH_REC_AM},      // span beyond the ring end and max_span
        {10, 1, 99},                    // unknown type
        {0, 3, RDMACH_REC_PAD},         // a pad that does not end at the ring end
    };
    for (const Bad &b : bad) {
        uint64_t pos          = c.rx.pos;
        rdmach_rec_hdr_t *hdr = c.slot(static_cast<uint32_t>(pos & (c.geom.nslots - 1)));
        hdr->length           = b.length;
        hdr->nslots           = b.nslots;
        hdr->type             = b.type;
        hdr->am_id            = 0;
        __atomic_store_n(&hdr->mark, pos + 1, __ATOMIC_RELEASE);
        // the forged record stands where the sender would write next: keep them in step
        c.tx.head = pos + 1 + ((b.nslots >= 1 && (pos & 63) + b.nslots <= 64) ? b.nslots - 1 : 0);
        c.tx.cached_tail = c.tx.head;
        EXPECT_EQ(1u, c.poll(1));
        EXPECT_EQ(c.tx.head, c.rx.pos);
        ASSERT_TRUE(c.send(9, payload, sizeof(payload)));
        EXPECT_EQ(1u, c.poll());
    }
    EXPECT_EQ(6u, c.stats.corrupt);
    ASSERT_EQ(6u, c.msgs.size()) << "every good record after a corrupt one is delivered";
    for (auto &m : c.msgs) {
        EXPECT_EQ(std::vector<uint8_t>(payload, payload + 8), m);
    }
}

TEST(RdmachRing, StaleLapAndZeroedMemoryAreNotNewRecords)
{
    Conn c(64, 8, 100, 0.5);
    uint8_t b = 1;
    EXPECT_EQ(0u, c.poll()) << "zeroed ring: mark 0 never equals position + 1";
    for (int i = 0; i < 8; ++i) {
        ASSERT_TRUE(c.send(1, &b, 1));
    }
    EXPECT_EQ(8u, c.poll());
    // the slots still hold the previous lap's records: none may be taken again
    EXPECT_EQ(0u, c.poll());
    EXPECT_EQ(8u, c.msgs.size());
}

// ---- poller: bounded progress with many connections ----

namespace {

struct Fleet {
    explicit Fleet(uint32_t n, int poll_all = 0) : conns()
    {
        for (uint32_t i = 0; i < n; ++i) {
            conns.emplace_back(new Conn(64, 64, 1000, 0.25));
        }
        rx.resize(n);
        hot.resize(n);
        doorbells.assign((n + 7) & ~7u, 0);
        p.rx             = rx.data();
        p.hot            = hot.data();
        p.nhot           = 0;
        p.hot_max        = n;
        p.max_rings      = n;
        p.doorbells      = doorbells.data();
        p.sweep_interval = 16;
        p.sweep_count    = 0;
        p.idle_limit     = 8;
        p.budget         = 16;
        p.poll_all       = poll_all;
        p.stats          = &stats;
        for (uint32_t i = 0; i < n; ++i) {
            conns[i]->tx.doorbell = &doorbells[i];
        }
    }
    ~Fleet()
    {
        for (auto *c : conns) {
            delete c;
        }
    }
    static int activate(void *arg, uint32_t id)
    {
        auto *f = static_cast<Fleet*>(arg);
        Conn *c = f->conns[id];
        rdmach_rx_init(&f->rx[id], &c->geom, c->ring, c->ctl, &c->tail_copy, &c->ops, c);
        return 1;
    }
    static void cb(void *arg, const rdmach_rx_t *, uint8_t, void *data, uint32_t)
    {
        static_cast<Fleet*>(arg)->got.push_back(*static_cast<uint8_t*>(data));
    }
    unsigned progress()
    {
        return rdmach_poller_progress(&p, static_cast<uint32_t>(conns.size()),
                                      &Fleet::activate, &Fleet::cb, this);
    }

    std::vector<Conn*> conns;
    std::vector<rdmach_rx_t> rx;
    std::vector<uint32_t> hot;
    std::vector<uint8_t> doorbells;
    rdmach_poller_t p{};
    rdmach_rx_stats_t stats{};
    std::vector<uint8_t> got;
};

}  // namespace

TEST(RdmachPoller, DoorbellPromotesIdleRingDemotes)
{
    Fleet f(64);
    uint8_t v = 42;

    EXPECT_EQ(0u, f.progress());
    ASSERT_TRUE(f.conns[37]->send(1, &v, 1));
    EXPECT_EQ(1, f.doorbells[37]) << "a cold ring's sender rings the doorbell";
    EXPECT_EQ(1u, f.progress()) << "delivered on the next call, not after a sweep";
    EXPECT_EQ(1u, f.p.nhot);
    EXPECT_EQ(1u, f.conns[37]->ctl->rx_hot);

    // while hot, senders do not touch the doorbell
    ASSERT_TRUE(f.conns[37]->send(1, &v, 1));
    EXPECT_EQ(0, f.doorbells[37]);
    EXPECT_EQ(1u, f.progress());

    for (int i = 0; i < 8; ++i) {
        f.progress();
    }
    EXPECT_EQ(0u, f.p.nhot) << "idle for idle_limit calls: demoted";
    EXPECT_EQ(0u, f.conns[37]->ctl->rx_hot);
    EXPECT_EQ(2u, f.got.size());
}

// The one-ring way (rdmach_poller_one) after a look that found nothing takes the record found
// and returns: an answer comes alone, and looking on delays it. After a call that took
// records it takes up to the budget, as the walk does, so a window still drains quickly.
TEST(RdmachPoller, OneTakesTheFoundRecordAloneAfterAQuietCall)
{
    Fleet f(64);
    uint8_t v[6] = {1, 2, 3, 4, 5, 6};
    const uint32_t claimed = 64;

    ASSERT_TRUE(f.conns[5]->send(1, &v[0], 1));         // cold: its doorbell makes it hot
    ASSERT_EQ(1u, f.progress());
    ASSERT_EQ(1u, f.p.nhot);
    ASSERT_EQ(RDMACH_POLL_QUIET, rdmach_poller_look(&f.p, claimed));
    for (int i = 1; i < 6; ++i) {
        ASSERT_TRUE(f.conns[5]->send(1, &v[i], 1));
    }
    ASSERT_EQ(RDMACH_POLL_ONE, rdmach_poller_look(&f.p, claimed));
    EXPECT_EQ(1u, rdmach_poller_one(&f.p, &Fleet::cb, &f)) << "after a quiet call: one";
    ASSERT_EQ(RDMACH_POLL_ONE, rdmach_poller_look(&f.p, claimed));
    EXPECT_EQ(std::min(4u, f.p.budget), rdmach_poller_one(&f.p, &Fleet::cb, &f))
        << "after a call that took: on to the budget";
    while (rdmach_poller_look(&f.p, claimed) == RDMACH_POLL_ONE) {
        rdmach_poller_one(&f.p, &Fleet::cb, &f);
    }
    EXPECT_EQ((std::vector<uint8_t>{1, 2, 3, 4, 5, 6}), f.got) << "all, in order";
}

// The glue's first look (rdmach_poller_look): QUIET only when the walk would find nothing,
// ONE when the only hot ring has a record and nothing else waits, and the calls it answered
// count into the walk's demotion and sweep counts, so both come after as many calls.
TEST(RdmachPoller, LookQuietOneOrWalkAndCountsItsCalls)
{
    Fleet f(64);
    uint8_t v = 7;
    const uint32_t claimed = 64;

    EXPECT_EQ(RDMACH_POLL_QUIET, rdmach_poller_look(&f.p, claimed)) << "no record, no doorbell";
    EXPECT_EQ(1u, f.p.skipped);
    ASSERT_TRUE(f.conns[9]->send(1, &v, 1));            // a cold ring: its doorbell
    EXPECT_EQ(RDMACH_POLL_WALK, rdmach_poller_look(&f.p, claimed)) << "a doorbell is rung";
    EXPECT_EQ(1u, f.progress());
    EXPECT_EQ(0u, f.p.skipped) << "the walk took the skipped calls into its counts";
    ASSERT_EQ(1u, f.p.nhot);

    ASSERT_TRUE(f.conns[9]->send(1, &v, 1));            // hot now: no doorbell
    ASSERT_EQ(0, f.doorbells[9]);
    ASSERT_EQ(RDMACH_POLL_ONE, rdmach_poller_look(&f.p, claimed)) << "the hot ring's record";
    EXPECT_EQ(1u, rdmach_poller_one(&f.p, &Fleet::cb, &f));
    EXPECT_EQ(2u, f.got.size());

    // a second hot ring with a record: the walk serves both in turn
    ASSERT_TRUE(f.conns[20]->send(1, &v, 1));
    EXPECT_EQ(1u, f.progress());
    ASSERT_EQ(2u, f.p.nhot);
    ASSERT_TRUE(f.conns[20]->send(1, &v, 1));
    EXPECT_EQ(RDMACH_POLL_WALK, rdmach_poller_look(&f.p, claimed));
    EXPECT_EQ(1u, f.progress());

    // idle: at most RDMACH_POLL_QUIET_MAX - 1 calls in a row without the walk
    unsigned quiet = 0;
    while (rdmach_poller_look(&f.p, claimed) == RDMACH_POLL_QUIET) {
        ASSERT_LT(++quiet, 100u);
    }
    EXPECT_EQ(RDMACH_POLL_QUIET_MAX - 1u, quiet);
    // idle_limit is 8: the skipped calls already count, so this walk demotes both rings
    EXPECT_EQ(0u, f.progress());
    EXPECT_EQ(0u, f.p.nhot) << "demoted after idle_limit calls, skipped ones included";
    EXPECT_EQ(4u, f.got.size());
}

TEST(RdmachPoller, LookAlwaysWalksWithPollAll)
{
    Fleet f(8, 1);
    EXPECT_EQ(RDMACH_POLL_WALK, rdmach_poller_look(&f.p, 8))
        << "the paper's way polls every ring every call";
}

TEST(RdmachPoller, SweepCatchesRecordWithoutDoorbell)
{
    Fleet f(64);
    uint8_t v = 5;
    for (uint32_t i = 0; i < 64; ++i) {
        Fleet::activate(&f, i);
    }
    // the demotion race: the sender saw rx_hot == 1 and skipped the doorbell
    f.conns[63]->ctl->rx_hot = 1;
    ASSERT_TRUE(f.conns[63]->send(1, &v, 1));
    f.conns[63]->ctl->rx_hot = 0;
    ASSERT_EQ(0, f.doorbells[63]);
    unsigned calls = 0;
    while (f.got.empty() && calls < 100) {
        f.progress();
        ++calls;
    }
    EXPECT_EQ(1u, f.got.size());
    EXPECT_LE(calls, f.p.sweep_interval) << "found within one sweep interval";
}

TEST(RdmachPoller, HotListIsCappedRestServedByDoorbells)
{
    Fleet f(64);
    f.p.hot_max = 4;
    // all 64 peers talk, round-robin: at most 4 rings become hot, the others keep ringing
    for (int lap = 0; lap < 3; ++lap) {
        for (uint32_t i = 0; i < 64; ++i) {
            uint8_t v = static_cast<uint8_t>(i);
            ASSERT_TRUE(f.conns[i]->send(1, &v, 1));
            if (i >= 4 || lap == 0) {
                EXPECT_EQ(1, f.doorbells[i]) << "ring " << i << " is cold: doorbell rung";
            }
            EXPECT_EQ(1u, f.progress()) << "lap " << lap << " ring " << i;
            EXPECT_LE(f.p.nhot, 4u);
        }
    }
    EXPECT_EQ(3u * 64, f.got.size());
    for (size_t k = 0; k < f.got.size(); ++k) {
        EXPECT_EQ(k % 64, f.got[k]);
    }
}

TEST(RdmachPoller, PollAllModeDeliversFromEveryRing)
{
    Fleet f(8, 1);
    for (uint8_t i = 0; i < 8; ++i) {
        ASSERT_TRUE(f.conns[i]->send(1, &i, 1));
    }
    EXPECT_EQ(8u, f.progress());
    EXPECT_EQ(8u, f.got.size());
}

// ---- wakeup: the receiver sleeps only when nothing waits; the next record wakes it ----

namespace {

int g_wakes;

void count_wake(void *)
{
    ++g_wakes;
}

}  // namespace

TEST(RdmachPoller, SleepMakesRingsColdAndTheNextRecordWakesOnce)
{
    for (int poll_all = 0; poll_all <= 1; ++poll_all) {
        Fleet f(8, poll_all);
        volatile uint32_t asleep = 0;
        uint8_t v = 7;

        for (auto *c : f.conns) {
            c->ops.wake  = count_wake;
            c->tx.asleep = &asleep;
        }
        for (uint8_t i = 0; i < 8; ++i) {
            ASSERT_TRUE(f.conns[i]->send(1, &i, 1));
        }
        f.progress();
        f.progress();
        EXPECT_EQ(8u, f.got.size());
        EXPECT_EQ(0, rdmach_poller_pending(&f.p, 8)) << "nothing waits";

        // what arm does: every ring cold, then the asleep word (the wire's part)
        rdmach_poller_sleep(&f.p, 8);
        asleep   = 1;
        g_wakes  = 0;
        for (auto *c : f.conns) {
            EXPECT_EQ(0u, c->ctl->rx_hot) << "poll_all " << poll_all;
        }
        EXPECT_EQ(0u, f.p.nhot);
        ASSERT_TRUE(f.conns[3]->send(1, &v, 1));
        EXPECT_EQ(1, g_wakes) << "the first record into a cold ring wakes the receiver";
        EXPECT_EQ(0u, asleep) << "and takes the word back";
        ASSERT_TRUE(f.conns[5]->send(1, &v, 1));
        EXPECT_EQ(1, g_wakes) << "one wakeup per sleep";
        EXPECT_EQ(1, rdmach_poller_pending(&f.p, 8));

        rdmach_poller_wake(&f.p, 8);
        if (poll_all) {
            for (auto *c : f.conns) {
                EXPECT_EQ(1u, c->ctl->rx_hot) << "poll_all: every ring always polled again";
            }
        }
        while (f.progress() != 0) {
        }
        EXPECT_EQ(10u, f.got.size());
        EXPECT_EQ(0, rdmach_poller_pending(&f.p, 8));
    }
}

TEST(RdmachPoller, PendingSeesARecordThatMissedTheDoorbell)
{
    Fleet f(4);
    volatile uint32_t asleep = 0;
    uint8_t v = 1;

    for (uint32_t i = 0; i < 4; ++i) {
        Fleet::activate(&f, i);
        f.conns[i]->tx.asleep = &asleep;
    }
    // a sender that read rx_hot == 1 just before the receiver made the ring cold: no doorbell,
    // no wakeup; the receiver's look after its barrier must find the record
    f.conns[2]->ctl->rx_hot = 1;
    ASSERT_TRUE(f.conns[2]->send(1, &v, 1));
    rdmach_poller_sleep(&f.p, 4);
    ASSERT_EQ(0, f.doorbells[2]);
    EXPECT_EQ(1, rdmach_poller_pending(&f.p, 4));
}

// The receiver drains the ring of a sender that has gone, which includes one that set its own
// closed word: a live one that writes on as fast as it is read must not keep the drain going.
// One lap of records at most.
TEST(RdmachRing, ADrainOfASenderThatWritesOnTakesOneLap)
{
    Conn c(256, 64, 4096, 0.25);
    struct Writer {
        Conn *c;
        unsigned delivered, sent;
        static void cb(void *arg, const rdmach_rx_t *, uint8_t, void *, uint32_t)
        {
            Writer *w = static_cast<Writer*>(arg);
            ++w->delivered;
            // a record for each one read (bounded here: 100 laps, where a drain without a
            // bound would run on)
            if ((w->sent < 100 * w->c->geom.nslots) && w->c->send(1, "x", 1)) {
                ++w->sent;
            }
            rdmach_tx_refresh_tail(&w->c->tx);
        }
    } w{&c, 0, 0};

    while (c.send(1, "x", 1)) {
        ++w.sent;
    }
    ASSERT_GT(w.sent, 0u);
    unsigned n = rdmach_rx_drain(&c.rx, &Writer::cb, &w, &c.stats);
    EXPECT_EQ(n, w.delivered);
    EXPECT_LE(n, c.geom.nslots) << "the drain ran past one lap";
    EXPECT_GT(n, 0u);
}
