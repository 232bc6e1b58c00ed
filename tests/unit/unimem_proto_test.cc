// Unit tier for the unimem mailbox protocol (uct/unimem/unimem_proto.[ch]) with an in-memory
// mailbox: short messages in one 32-byte message, fragmentation and per-sender reassembly
// (also with the senders' fragments interleaved), and corrupt messages dropped and counted.
#include "unimem_proto.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

struct Delivered {
    uint8_t am_id;
    std::vector<uint8_t> data;
};

struct Rx {
    explicit Rx(uint32_t max_senders = 8, uint32_t max_len = 8192)
    {
        EXPECT_EQ(0, unimem_rx_init(&rx, max_senders, max_len, &stats, cb, this));
    }
    ~Rx() { unimem_rx_cleanup(&rx); }
    static void cb(void *arg, uint8_t am_id, void *data, uint32_t length)
    {
        auto *self = static_cast<Rx*>(arg);
        auto *p    = static_cast<uint8_t*>(data);
        self->got.push_back({am_id, std::vector<uint8_t>(p, p + length)});
        memset(data, 0xee, length);   // the handler may scribble: nothing must depend on it
    }
    void feed(const std::vector<unimem_msg_t> &msgs)
    {
        for (auto m : msgs) {   // the receiver decodes its private copy
            unimem_rx_msg(&rx, &m);
        }
    }
    unimem_rx_t rx{};
    unimem_rx_stats_t stats{};
    std::vector<Delivered> got;
};

std::vector<uint8_t> pattern(size_t len, unsigned seed)
{
    std::vector<uint8_t> v(len);
    for (size_t i = 0; i < len; ++i) {
        v[i] = (uint8_t)(seed * 77u + i * 13u + (i >> 8));
    }
    return v;
}

std::vector<unimem_msg_t> pack(uint8_t am_id, uint16_t sender, const std::vector<uint8_t> &d)
{
    std::vector<unimem_msg_t> msgs(unimem_proto_nmsgs(d.size()));
    unsigned n = unimem_proto_pack(msgs.data(), am_id, sender, d.data(), d.size());
    EXPECT_EQ(msgs.size(), n);
    return msgs;
}

}  // namespace

TEST(UnimemProto, ShortIsOneMessageWithTwoBytesOfHeader)
{
    Rx r;
    for (size_t len = 0; len <= UNIMEM_PROTO_SHORT_MAX; ++len) {
        auto d = pattern(len, (unsigned)len);
        auto msgs = pack((uint8_t)(len % 32), 0, d);
        ASSERT_EQ(1u, msgs.size());
        r.feed(msgs);
    }
    ASSERT_EQ(31u, r.got.size());
    for (size_t len = 0; len <= UNIMEM_PROTO_SHORT_MAX; ++len) {
        EXPECT_EQ(len % 32, r.got[len].am_id);
        EXPECT_EQ(pattern(len, (unsigned)len), r.got[len].data);
    }
    EXPECT_EQ(0u, r.stats.corrupt);

    // UCT's am_short: an 8-byte header and up to 22 bytes
    unimem_msg_t m;
    auto payload = pattern(22, 5);
    unimem_proto_short(&m, 9, 0x1122334455667788ull, 8, payload.data(), 22);
    r.feed({m});
    ASSERT_EQ(32u, r.got.size());
    EXPECT_EQ(30u, r.got.back().data.size());
    EXPECT_EQ(0x88, r.got.back().data[0]);
    EXPECT_TRUE(std::equal(payload.begin(), payload.end(), r.got.back().data.begin() + 8));
}

TEST(UnimemProto, SmallCopyWritesExactlyItsBytes)
{
    // ucx_ext_copy_small (uct/common/ucx_ext_sys.h), which packs a SHORT's payload: every
    // length it takes, at every offset of a line, and not a byte beyond either end
    for (size_t len = 0; len <= 32; ++len) {
        for (size_t off = 0; off < 8; ++off) {
            std::vector<uint8_t> src = pattern(len + off + 16, (unsigned)len);
            std::vector<uint8_t> dst(len + 48, 0xa5);
            ucx_ext_copy_small(dst.data() + 16 + off % 3, src.data() + off, len);
            for (size_t i = 0; i < dst.size(); ++i) {
                bool inside = (i >= 16 + off % 3) && (i < 16 + off % 3 + len);
                ASSERT_EQ(inside ? src[off + i - 16 - off % 3] : 0xa5, dst[i])
                    << "len " << len << " off " << off << " byte " << i;
            }
        }
    }
}

TEST(UnimemProto, TheInlineShortWayDecodesAsTheDecoder)
{
    // unimem_rx_msg_inline (the iface's way) against unimem_rx_msg on the same stream:
    // SHORTs of every length byte, then garbage and fragments, in one order
    Rx a, b;
    std::mt19937 rng(11);
    for (int i = 0; i < 20000; ++i) {
        unimem_msg_t m;
        for (auto &x : m.b) {
            x = (uint8_t)rng();
        }
        if (i % 2 == 0) {
            m.b[0] = (uint8_t)((UNIMEM_PROTO_SHORT << 5) | (rng() % 32));
            m.b[1] = (uint8_t)(i < 512 ? i / 2 : rng() % 40);
        }
        unimem_msg_t ma = m, mb = m;
        unimem_rx_msg(&a.rx, &ma);
        unimem_rx_msg_inline(&b.rx, &mb, Rx::cb, &b);
    }
    for (uint16_t s = 0; s < 4; ++s) {
        for (auto m : pack(3, s, pattern(100, s))) {
            unimem_msg_t mb = m;
            unimem_rx_msg(&a.rx, &m);
            unimem_rx_msg_inline(&b.rx, &mb, Rx::cb, &b);
        }
    }
    ASSERT_EQ(a.got.size(), b.got.size());
    for (size_t i = 0; i < a.got.size(); ++i) {
        EXPECT_EQ(a.got[i].am_id, b.got[i].am_id);
        EXPECT_EQ(a.got[i].data, b.got[i].data);
    }
    EXPECT_EQ(a.stats.msgs, b.stats.msgs);
    EXPECT_EQ(a.stats.am, b.stats.am);
    EXPECT_EQ(a.stats.bytes, b.stats.bytes);
    EXPECT_EQ(a.stats.corrupt, b.stats.corrupt);
    EXPECT_GT(b.stats.corrupt, 0u);
    EXPECT_EQ(pattern(100, 3), b.got.back().data);
}

TEST(UnimemProto, FragmentCountAndReassembly)
{
    EXPECT_EQ(1u, unimem_proto_nmsgs(30));
    EXPECT_EQ(2u, unimem_proto_nmsgs(31));
    EXPECT_EQ(2u, unimem_proto_nmsgs(52));
    EXPECT_EQ(3u, unimem_proto_nmsgs(53));
    EXPECT_EQ(1u + (4096u - 24u + 27u) / 28u, unimem_proto_nmsgs(4096));

    Rx r;
    std::vector<size_t> sizes;
    for (size_t len = 31; len < 200; ++len) {
        sizes.push_back(len);
    }
    for (size_t len : {1000ul, 4096ul, 8191ul, 8192ul}) {
        sizes.push_back(len);
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
        r.feed(pack(3, 1, pattern(sizes[i], (unsigned)i)));
    }
    ASSERT_EQ(sizes.size(), r.got.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
        EXPECT_EQ(3, r.got[i].am_id);
        ASSERT_EQ(pattern(sizes[i], (unsigned)i), r.got[i].data) << sizes[i];
    }
    EXPECT_EQ(0u, r.stats.corrupt);
    EXPECT_EQ(sizes.size(), r.stats.am);
}

TEST(UnimemProto, InterleavedSendersAreReassembledApart)
{
    Rx r;
    const unsigned nsenders = 5, per = 20;
    std::vector<std::vector<unimem_msg_t>> streams(nsenders);
    for (unsigned s = 0; s < nsenders; ++s) {
        for (unsigned i = 0; i < per; ++i) {
            auto msgs = pack((uint8_t)s, (uint16_t)s, pattern(10 + 97 * i + s, s * 1000 + i));
            streams[s].insert(streams[s].end(), msgs.begin(), msgs.end());
        }
    }
    // the mailbox keeps each sender's order but mixes senders: take from random streams
    std::mt19937 rng(42);
    std::vector<size_t> pos(nsenders, 0);
    size_t left = 0;
    for (auto &st : streams) {
        left += st.size();
    }
    std::vector<unsigned> next_of(nsenders, 0);
    while (left > 0) {
        unsigned s = rng() % nsenders;
        if (pos[s] == streams[s].size()) {
            continue;
        }
        r.feed({streams[s][pos[s]++]});
        --left;
    }
    ASSERT_EQ(nsenders * per, r.got.size());
    for (auto &d : r.got) {
        unsigned s = d.am_id, i = next_of[s]++;
        ASSERT_EQ(pattern(10 + 97 * i + s, s * 1000 + i), d.data) << "sender " << s << " #" << i;
    }
    EXPECT_EQ(0u, r.stats.corrupt);
}

TEST(UnimemProto, CorruptMessagesAreDroppedAndCounted)
{
    Rx r(4, 1000);
    auto good = pack(2, 1, pattern(100, 1));   // FIRST + 3 CONT
    ASSERT_EQ(4u, good.size());
    unimem_msg_t m;

    memset(&m, 0, sizeof(m));                  // type 0 (zeroed memory)
    r.feed({m});
    m.b[0] = (uint8_t)(6 << 5);                // unknown type
    r.feed({m});
    m.b[0] = (uint8_t)(UNIMEM_PROTO_SHORT << 5);
    m.b[1] = 31;                               // SHORT longer than a message
    r.feed({m});
    EXPECT_EQ(3u, r.stats.corrupt);

    r.feed({good[1]});                         // CONT without FIRST
    EXPECT_EQ(4u, r.stats.corrupt);
    r.feed({good[0], good[2]});                // CONT out of sequence: the partial goes
    EXPECT_EQ(5u, r.stats.corrupt);
    r.feed({good[3]});                         // its rest has no FIRST any more
    EXPECT_EQ(6u, r.stats.corrupt);

    auto big = pack(2, 1, pattern(1001, 2));   // beyond the receiver's limit
    r.feed({big[0]});
    EXPECT_EQ(7u, r.stats.corrupt);
    auto stranger = pack(2, 4, pattern(100, 3));   // sender id beyond the table
    r.feed({stranger[0]});
    EXPECT_EQ(8u, r.stats.corrupt);

    auto other = good;
    other[1].b[0] = (uint8_t)((UNIMEM_PROTO_CONT << 5) | 7);   // another AM id mid-message
    r.feed({other[0], other[1]});
    EXPECT_EQ(9u, r.stats.corrupt);

    r.feed({good[0], good[1]});                // a FIRST while a message is in progress:
    r.feed(good);                              // the partial one is dropped, this one lands
    EXPECT_EQ(10u, r.stats.corrupt);

    auto zero = good;
    zero[0].b[4] = zero[0].b[5] = zero[0].b[6] = zero[0].b[7] = 0;   // total length 0
    r.feed({zero[0]});
    EXPECT_EQ(11u, r.stats.corrupt);

    ASSERT_EQ(1u, r.got.size()) << "only the intact message is delivered";
    EXPECT_EQ(pattern(100, 1), r.got[0].data);
    r.feed(pack(1, 0, pattern(20, 9)));        // and the receiver still works
    ASSERT_EQ(2u, r.got.size());
    EXPECT_EQ(pattern(20, 9), r.got[1].data);
}

TEST(UnimemProto, RandomGarbageNeverCrashesOrOverflows)
{
    Rx r(4, 300);
    std::mt19937 rng(7);
    for (int i = 0; i < 200000; ++i) {
        unimem_msg_t m;
        for (auto &b : m.b) {
            b = (uint8_t)rng();
        }
        if (i % 3 == 0) {   // make plausible headers common
            m.b[0] = (uint8_t)(((1 + rng() % 3) << 5) | (rng() % 32));
            m.b[1] = (uint8_t)(rng() % 8);
            m.b[2] = (uint8_t)(rng() % 5);
            m.b[3] = 0;
            m.b[5] = m.b[6] = m.b[7] = 0;
        }
        r.feed({m});
    }
    for (auto &d : r.got) {
        EXPECT_LE(d.data.size(), 300u);
    }
    EXPECT_GT(r.stats.corrupt, 0u);
    size_t before = r.got.size();
    for (uint16_t s = 0; s < 4; ++s) {   // every sender's stream still works afterwards
        r.feed(pack(1, s, pattern(250, s)));
    }
    ASSERT_EQ(before + 4, r.got.size());
    EXPECT_EQ(pattern(250, 3), r.got.back().data);
}

namespace {

// A receiver with a landing area (LAND): senders x slots slots, sized exactly, so that ASan
// catches any access beyond it.
struct LandRx : Rx {
    LandRx(uint32_t senders, uint32_t slots, uint32_t max_len)
        : Rx(senders, max_len), slots(slots), slot_size(unimem_land_slot_size(max_len)),
          area(unimem_land_area_size(senders, slots, max_len))
    {
        unimem_rx_land(&rx, area.data(), senders, slots);
    }
    uint8_t *slot(uint16_t sender, uint8_t i)
    {
        return area.data() + ((size_t)sender * slots + i) * slot_size;
    }
    // what a sender does: store the payload, mark the slot, ring with one LAND
    // a LANDI: the head in the message, the rest in the slot's first line
    unimem_msg_t landi(uint8_t am_id, uint16_t sender, uint8_t i, const std::vector<uint8_t> &d)
    {
        unimem_msg_t m;
        memset(&m, 0, sizeof(m));
        memcpy(&m.b[8], d.data(), UNIMEM_LANDI_HEAD);
        memcpy(slot(sender, i) + UNIMEM_LAND_HDR, d.data() + UNIMEM_LANDI_HEAD,
               d.size() - UNIMEM_LANDI_HEAD);
        *unimem_land_busy(slot(sender, i)) = 1;
        unimem_proto_land_type(&m, UNIMEM_PROTO_LANDI, am_id, sender, i, (uint32_t)d.size());
        return m;
    }
    unimem_msg_t land(uint8_t am_id, uint16_t sender, uint8_t i, const std::vector<uint8_t> &d)
    {
        if (!d.empty()) {
            memcpy(slot(sender, i) + UNIMEM_LAND_HDR, d.data(), d.size());
        }
        *unimem_land_busy(slot(sender, i)) = 1;
        unimem_msg_t m;
        unimem_proto_land(&m, am_id, sender, i, (uint32_t)d.size());
        return m;
    }
    uint32_t slots;
    size_t slot_size;
    std::vector<uint8_t> area;
};

}  // namespace

TEST(UnimemProtoLand, OneMessageDeliversFromTheSlotAndFreesIt)
{
    LandRx r(4, 8, 8192);
    EXPECT_EQ(8256u, r.slot_size);   // 8 bytes of header, cache-line multiples
    for (size_t len : {0, 1, 31, 100, 4096, 8192}) {
        auto d = pattern(len, (unsigned)len);
        r.feed({r.land(9, 2, 7, d)});
        EXPECT_EQ(0u, *unimem_land_busy(r.slot(2, 7))) << "freed after the handler";
        ASSERT_FALSE(r.got.empty());
        EXPECT_EQ(9, r.got.back().am_id);
        EXPECT_EQ(d, r.got.back().data);
    }
    EXPECT_EQ(6u, r.stats.land);
    EXPECT_EQ(6u, r.stats.msgs) << "one mailbox message each";
    EXPECT_EQ(0u, r.stats.corrupt);
}

TEST(UnimemProtoLand, InterleavesWithFragmentsInTheSendersOrder)
{
    // a sender whose slot is busy fragments: both arrive through the one mailbox, in order
    LandRx r(2, 2, 1000);
    std::vector<unimem_msg_t> stream;
    auto a = pattern(500, 1), b = pattern(700, 2), c = pattern(60, 3);
    stream.push_back(r.land(1, 1, 0, a));
    for (auto &m : pack(2, 1, b)) {
        stream.push_back(m);
    }
    stream.push_back(r.land(3, 1, 1, c));
    r.feed(stream);
    ASSERT_EQ(3u, r.got.size());
    EXPECT_EQ(a, r.got[0].data);
    EXPECT_EQ(b, r.got[1].data);
    EXPECT_EQ(c, r.got[2].data);
    EXPECT_EQ(2u, r.stats.land);
    EXPECT_EQ(0u, r.stats.corrupt);
}

// unimem_rx_land_prefault: what the first LAND into each ring below the bound asked for
static std::vector<std::pair<uint8_t*, size_t>> land_news;
static void record_land_new(uint8_t *ring, size_t len)
{
    land_news.emplace_back(ring, len);
}

TEST(UnimemProtoLand, FirstLandIntoARingBelowTheBoundPrefaultsItOnce)
{
    auto d = pattern(100, 7);
    unimem_msg_t m;
    LandRx r(4, 4, 1000);
    land_news.clear();
    unimem_rx_land_prefault(&r.rx, 2, record_land_new);
    unimem_proto_land(&m, 1, 1, 0, 100);        // a slot sender 1 never marked: dropped first
    r.feed({m});
    EXPECT_TRUE(land_news.empty()) << "a dropped LAND is not a ring's first use";
    r.feed({r.land(1, 0, 0, d), r.land(1, 0, 1, d), r.land(1, 1, 3, d), r.land(1, 3, 0, d)});
    ASSERT_EQ(2u, land_news.size()) << "senders 0 and 1, once each; 3 is beyond the bound";
    EXPECT_EQ(r.slot(0, 0), land_news[0].first);
    EXPECT_EQ(r.slot(1, 0), land_news[1].first) << "the ring's start, not the slot's";
    EXPECT_EQ(4 * r.slot_size, land_news[1].second) << "the whole ring";
    EXPECT_EQ(4u, r.got.size());
    EXPECT_EQ(1u, r.stats.corrupt);

    LandRx big(4, 2, 1000);                     // a bound beyond the rings: every ring
    land_news.clear();
    unimem_rx_land_prefault(&big.rx, 1000, record_land_new);
    big.feed({big.land(1, 3, 1, d)});
    ASSERT_EQ(1u, land_news.size());
    EXPECT_EQ(big.slot(3, 0), land_news[0].first);

    LandRx none(4, 2, 1000);                    // no callback: nothing, whatever the bound
    land_news.clear();
    unimem_rx_land_prefault(&none.rx, 4, NULL);
    none.feed({none.land(1, 0, 0, d)});
    EXPECT_TRUE(land_news.empty());
    EXPECT_EQ(1u, none.got.size());
}

TEST(UnimemProtoLand, BadLandsAreDroppedAndCounted)
{
    auto d = pattern(64, 5);
    unimem_msg_t m;
    {
        Rx plain(4, 1000);   // no landing area exported
        unimem_proto_land(&m, 1, 0, 0, 10);
        plain.feed({m});
        EXPECT_EQ(1u, plain.stats.corrupt);
        EXPECT_TRUE(plain.got.empty());
    }
    LandRx r(4, 4, 1000);
    r.land(1, 3, 3, d);                        // a valid slot to aim the bad ones near
    unimem_proto_land(&m, 1, 4, 0, 64);        // sender beyond the table
    r.feed({m});
    unimem_proto_land(&m, 1, 3, 4, 64);        // slot beyond the ring
    r.feed({m});
    unimem_proto_land(&m, 1, 3, 3, 1001);      // longer than the receiver's limit
    r.feed({m});
    unimem_proto_land(&m, 1, 3, 2, 64);        // a slot the sender never marked
    r.feed({m});
    EXPECT_EQ(4u, r.stats.corrupt);
    EXPECT_TRUE(r.got.empty());
    unimem_proto_land(&m, 1, 3, 3, 64);        // the real one still goes
    r.feed({m, m});                            // and again: its slot is free now
    ASSERT_EQ(1u, r.got.size());
    EXPECT_EQ(d, r.got[0].data);
    EXPECT_EQ(5u, r.stats.corrupt);

    // senders beyond LAND_SENDERS have no ring: their LANDs are refused, fragments go
    Rx few(8, 1000);
    std::vector<uint8_t> area(unimem_land_area_size(2, 4, 1000));
    unimem_rx_land(&few.rx, area.data(), 2, 4);
    unimem_proto_land(&m, 1, 2, 0, 10);
    few.feed({m});
    EXPECT_EQ(1u, few.stats.corrupt);
    few.feed(pack(1, 7, pattern(100, 4)));
    ASSERT_EQ(1u, few.got.size());
    EXPECT_EQ(pattern(100, 4), few.got[0].data);
}

TEST(UnimemProtoLand, RandomGarbageNeverLeavesTheArea)
{
    LandRx r(4, 3, 300);
    std::mt19937 rng(11);
    for (int i = 0; i < 200000; ++i) {
        unimem_msg_t m;
        for (auto &b : m.b) {
            b = (uint8_t)rng();
        }
        if (i % 2 == 0) {   // plausible LANDs and LANDIs, busy slots, lengths near the limit
            m.b[0] = (uint8_t)(((UNIMEM_PROTO_LAND + rng() % 2) << 5) | (rng() % 32));
            m.b[1] = (uint8_t)(rng() % 5);
            m.b[2] = (uint8_t)(rng() % 6);
            m.b[3] = 0;
            uint32_t len = rng() % 320;
            m.b[4] = (uint8_t)len;
            m.b[5] = (uint8_t)(len >> 8);
            m.b[6] = m.b[7] = 0;
            *unimem_land_busy(r.slot((uint16_t)(rng() % 4), (uint8_t)(rng() % 3))) = 1;
        }
        r.feed({m});
    }
    for (auto &d : r.got) {
        EXPECT_LE(d.data.size(), 300u);
    }
    EXPECT_GT(r.stats.land, 0u);
    EXPECT_GT(r.stats.corrupt, 0u);
}

TEST(UnimemProtoLand, InlineHeadJoinsTheSlotsFirstLine)
{
    LandRx r(2, 4, 1000);
    for (size_t len : {24, 31, 72, 80}) {
        auto d = pattern(len, (unsigned)len);
        r.feed({r.landi(4, 1, 2, d)});
        EXPECT_EQ(0u, *unimem_land_busy(r.slot(1, 2)));
        ASSERT_FALSE(r.got.empty());
        EXPECT_EQ(4, r.got.back().am_id);
        EXPECT_EQ(d, r.got.back().data);
    }
    EXPECT_EQ(4u, r.stats.land);
    EXPECT_EQ(0u, r.stats.corrupt);

    unimem_msg_t m = r.landi(4, 1, 3, pattern(80, 1));
    m.b[4] = 81;                               // beyond one line of the slot
    r.feed({m});
    m.b[4] = 23;                               // shorter than its own head
    r.feed({m});
    EXPECT_EQ(2u, r.stats.corrupt);
    EXPECT_EQ(4u, r.got.size());
}
