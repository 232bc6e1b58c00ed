/*
 * Unit tier for the ud_zcopy UDP wire (uct/ud_zcopy/udz_udp.c) on real loopback sockets: the
 * zero-copy receive of a data channel, with and without UDP GRO. The sender is another wire
 * sending through UDP GSO, so a run of equal datagrams reaches the channel as one coalesced
 * packet (kept whole across loopback as across a veth). Checked: every datagram of a run lands
 * in its own [header, payload] slot pair; a run whose datagrams are not one slot pair long is
 * reported as its first datagram plus one truncated remainder (dropped by the core) and writes
 * nothing outside the slots; a run is never received into room too small for it (its tail
 * would be cut and lost); and the plain recvmmsg path gives the same result. And the wire table
 * (udz_wire.h) of every built-in wire, as the glue uses it: devices, open, addresses.
 */
#include "udz_proto.h"
#include "udz_udp.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/udp.h>
#include <poll.h>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr size_t kChunk = 1440;             /* Ethernet: 1500 - IP - UDP - ud_zcopy header */
constexpr size_t kPair  = UDZ_HDR_LEN + kChunk;
constexpr size_t kSlots = 45;               /* ceil(64 KiB / kPair), as the core's zbatch */
constexpr size_t kGuard = 64;
constexpr uint8_t kCanary = 0xa5;

struct Wire {
    udz_udp_t *u = static_cast<udz_udp_t*>(calloc(1, sizeof(udz_udp_t)));
    Wire(unsigned nchan, int gro)
    {
        char err[256] = "";
        struct in_addr lo;
        inet_pton(AF_INET, "127.0.0.1", &lo);
        int rc = udz_udp_open(u, lo, nchan, 4 << 20, 4 << 20, gro, err, sizeof(err));
        EXPECT_EQ(0, rc) << err;
    }
    ~Wire()
    {
        udz_udp_close(u);
        free(u);
    }
    udz_addr_t chan_addr(unsigned c) const
    {
        udz_addr_t a;
        udz_udp_addr_make(u->ip, u->chan_port[c - 1], &a);
        /* the block: channel i on the port i + 1 after the control socket's */
        EXPECT_EQ(ntohs(u->port) + c, ntohs(u->chan_port[c - 1]));
        return a;
    }
};

/* Receive slots: kSlots [header, payload] pairs, each area fenced by canary bytes. */
struct Slots {
    static constexpr size_t stride_hdr = UDZ_HDR_LEN + 2 * kGuard;
    static constexpr size_t stride_pay = kChunk + 2 * kGuard;
    std::vector<uint8_t> mem;
    std::vector<udz_rxmsg_t> msgs;

    explicit Slots(size_t n = kSlots) : mem(n * (stride_hdr + stride_pay), kCanary), msgs(n)
    {
        for (size_t i = 0; i < n; ++i) {
            msgs[i].iov[0].iov_base = hdr(i);
            msgs[i].iov[0].iov_len  = UDZ_HDR_LEN;
            msgs[i].iov[1].iov_base = pay(i);
            msgs[i].iov[1].iov_len  = kChunk;
        }
    }
    uint8_t *hdr(size_t i) { return &mem[i * (stride_hdr + stride_pay) + kGuard]; }
    uint8_t *pay(size_t i) { return &mem[i * (stride_hdr + stride_pay) + stride_hdr + kGuard]; }
    bool guards_intact()
    {
        for (size_t i = 0; i < msgs.size(); ++i) {
            for (size_t g = 0; g < kGuard; ++g) {
                if ((hdr(i)[-1 - (long)g] != kCanary) || (hdr(i)[UDZ_HDR_LEN + g] != kCanary) ||
                    (pay(i)[-1 - (long)g] != kCanary) || (pay(i)[kChunk + g] != kCanary)) {
                    return false;
                }
            }
        }
        return true;
    }
};

uint8_t pattern(unsigned run, unsigned dgram, size_t off)
{
    return (uint8_t)(run * 131 + dgram * 31 + off * 7 + 1);
}

/* Sends one run of n datagrams of hdr_len + pay_len bytes (the last one last_pay bytes of
 * payload) through the sending wire: UDP GSO makes it one packet. */
void send_run(Wire &tx, const udz_addr_t &dst, unsigned run, unsigned n, size_t pay_len,
              size_t last_pay, std::vector<std::vector<uint8_t>> &keep)
{
    std::vector<udz_txmsg_t> msgs(n);
    for (unsigned i = 0; i < n; ++i) {
        size_t plen = (i + 1 == n) ? last_pay : pay_len;
        keep.emplace_back(UDZ_HDR_LEN + plen);
        std::vector<uint8_t> &b = keep.back();
        for (size_t o = 0; o < b.size(); ++o) {
            b[o] = pattern(run, i, o);
        }
        msgs[i].iov[0].iov_base = b.data();
        msgs[i].iov[0].iov_len  = UDZ_HDR_LEN;
        msgs[i].iov[1].iov_base = b.data() + UDZ_HDR_LEN;
        msgs[i].iov[1].iov_len  = plen;
        msgs[i].iovcnt          = 2;
    }
    unsigned sent = 0;
    for (int tries = 0; (sent < n) && (tries < 1000); ++tries) {
        int rc = udz_udp_wire.chan_send(tx.u, &dst, &msgs[sent], (int)(n - sent));
        ASSERT_GE(rc, 0);
        sent += (unsigned)rc;
    }
    ASSERT_EQ(n, sent);
}

/* One receive call on channel 1, after waiting (at most 2 s) for something to be there. */
int recv_once(Wire &rx, Slots &s, size_t nslots)
{
    struct pollfd p = {rx.u->chan_fd[0], POLLIN, 0};
    if (poll(&p, 1, 2000) != 1) {
        return 0;
    }
    return udz_udp_wire.chan_recv(rx.u, 0, s.msgs.data(), (int)nslots);
}

void expect_datagram(Slots &s, size_t slot, unsigned run, unsigned dgram, size_t pay_len)
{
    const udz_rxmsg_t &m = s.msgs[slot];
    ASSERT_EQ(UDZ_HDR_LEN + pay_len, m.len) << "slot " << slot;
    EXPECT_FALSE(m.trunc);
    EXPECT_FALSE(m.unreach);
    for (size_t o = 0; o < UDZ_HDR_LEN; ++o) {
        ASSERT_EQ(pattern(run, dgram, o), s.hdr(slot)[o]) << "slot " << slot << " hdr " << o;
    }
    for (size_t o = 0; o < pay_len; ++o) {
        ASSERT_EQ(pattern(run, dgram, UDZ_HDR_LEN + o), s.pay(slot)[o])
            << "slot " << slot << " payload " << o;
    }
}

struct Expect {
    unsigned run, dgram;
    size_t   pay_len;
};

/* Receives n datagrams on channel 1; datagram d must be expect(d). Returns the calls it took
 * (0 when something was lost or wrong: the failure is recorded). */
template <class F> unsigned recv_all(Wire &tx, Wire &rx, Slots &s, unsigned n, F expect)
{
    udz_addr_t src;
    unsigned got = 0, calls = 0;

    udz_udp_addr_make(tx.u->ip, tx.u->port, &src);
    while (got < n) {
        int rc = recv_once(rx, s, kSlots);
        EXPECT_GT(rc, 0) << "after " << got << " datagrams: lost";
        if (rc <= 0) {
            return 0;
        }
        for (int i = 0; i < rc; ++i) {
            Expect e = expect(got + (unsigned)i);
            expect_datagram(s, (size_t)i, e.run, e.dgram, e.pay_len);
            EXPECT_EQ(0, memcmp(&src, &s.msgs[i].src, sizeof(src)));
        }
        got += (unsigned)rc;
        ++calls;
    }
    return calls;
}

/* A sending wire, a receiving wire with one data channel (GRO as the parameter says) and
 * the receive slots; skipped when GRO is asked for and the kernel lacks it. */
class UdzUdpGro : public ::testing::TestWithParam<int> {
protected:
    Wire tx{0, 0}, rx{1, GetParam()};
    Slots s;
    std::vector<std::vector<uint8_t>> keep;

    void SetUp() override
    {
        if (GetParam() && !rx.u->gro) {
            GTEST_SKIP() << "kernel without UDP_GRO";
        }
    }
};

/* 44 full datagrams and a short last one (a transfer's tail) arrive each in its own slot pair,
 * with GRO in few receive calls, and the sender's address reported for every one. */
TEST_P(UdzUdpGro, RunScattersIntoSlotPairs)
{
    const unsigned n = 44;
    send_run(tx, rx.chan_addr(1), 1, n, kChunk, 1000, keep);

    unsigned calls = recv_all(tx, rx, s, n, [&](unsigned d) {
        return Expect{1, d, (d + 1 == n) ? 1000 : kChunk};
    });
    ASSERT_GT(calls, 0u);
    EXPECT_TRUE(s.guards_intact());
    if (GetParam() && tx.u->gso) {
        EXPECT_LT(calls, 4u) << "GRO: a coalesced run should come in one or a few calls";
    }
}

/* Two runs back to back, slots for 45: the first run fills 44, and the wire does not start
 * the second into the one slot left (it would be cut to one datagram); the next call gets it. */
TEST_P(UdzUdpGro, RunNeverReceivedIntoTooLittleRoom)
{
    send_run(tx, rx.chan_addr(1), 1, 44, kChunk, kChunk, keep);
    send_run(tx, rx.chan_addr(1), 2, 44, kChunk, kChunk, keep);

    EXPECT_GT(recv_all(tx, rx, s, 88, [](unsigned d) {
        return Expect{(d < 44) ? 1u : 2u, d % 44, kChunk};
    }), 0u);
    EXPECT_TRUE(s.guards_intact());
}

/* A run of datagrams shorter than a slot pair (another chunk size: a stale or foreign
 * sender): its first datagram is reported whole (header in place), the rest as one truncated
 * piece; nothing is written outside the slots. Then a good run is received normally. */
TEST_P(UdzUdpGro, MisalignedRunIsDroppedWithinSlots)
{
    send_run(tx, rx.chan_addr(1), 3, 20, 700, 700, keep);

    int rc = recv_once(rx, s, kSlots);
    ASSERT_GT(rc, 0);
    expect_datagram(s, 0, 3, 0, 700);
    if (GetParam() && tx.u->gso) {
        ASSERT_EQ(2, rc);
        EXPECT_TRUE(s.msgs[1].trunc);
        EXPECT_EQ(19u * (UDZ_HDR_LEN + 700), s.msgs[1].len);
    } else {
        /* one datagram per slot pair: every one whole */
        unsigned got = (unsigned)rc;
        for (unsigned i = 1; i < got; ++i) {
            expect_datagram(s, i, 3, i, 700);
        }
    }
    EXPECT_TRUE(s.guards_intact());

    /* drain what is left of the short run (plain path), then a well-formed run */
    while (true) {
        struct pollfd p = {rx.u->chan_fd[0], POLLIN, 0};
        if (poll(&p, 1, 50) != 1) {
            break;
        }
        ASSERT_GT(udz_udp_wire.chan_recv(rx.u, 0, s.msgs.data(), (int)kSlots), 0);
    }
    send_run(tx, rx.chan_addr(1), 4, 10, kChunk, kChunk, keep);
    EXPECT_GT(recv_all(tx, rx, s, 10, [](unsigned d) { return Expect{4, d, kChunk}; }), 0u);
    EXPECT_TRUE(s.guards_intact());
}

/* A datagram larger than a slot pair, on its own (not a run): reported with its real length
 * (the core drops it on the length check), never written past the offered slots. */
TEST_P(UdzUdpGro, OversizedDatagramStaysInsideSlots)
{
    Slots two(2);
    send_run(tx, rx.chan_addr(1), 5, 1, 4 * kChunk, 4 * kChunk, keep);
    int rc = recv_once(rx, two, 2);
    ASSERT_EQ(1, rc);
    EXPECT_TRUE((two.msgs[0].len != kPair) || two.msgs[0].trunc);
    EXPECT_TRUE(two.guards_intact());
}

/* A path that never coalesces (every datagram its own packet): after UDZ_UDP_GRO_OFF of them
 * the channel drops GRO and reads batches with recvmmsg; a GSO run sent then is cut at the
 * socket and still arrives whole; after UDZ_UDP_GRO_PROBE datagrams GRO is tried again. */
TEST(UdzUdpGroAdapt, UncoalescedPathFallsBackToRecvmmsgAndProbesAgain)
{
    Wire tx(0, 0), rx(1, 1);
    if (!rx.u->gro) {
        GTEST_SKIP() << "kernel without UDP_GRO";
    }
    Slots s;
    std::vector<std::vector<uint8_t>> keep;
    /* count datagrams, each sent on its own (no GSO run), received and checked 32 at a time */
    auto singles = [&](unsigned count) {
        while (count > 0) {
            unsigned n = (count > 32) ? 32 : count;
            for (unsigned i = 0; i < n; ++i) {
                send_run(tx, rx.chan_addr(1), 10, 1, kChunk, kChunk, keep);
            }
            EXPECT_GT(recv_all(tx, rx, s, n, [](unsigned) { return Expect{10, 0, kChunk}; }),
                      0u);
            count -= n;
            keep.clear();
        }
    };
    singles(UDZ_UDP_GRO_OFF);
    EXPECT_EQ(0, rx.u->chan_gro[0]) << "still one call per datagram after "
                                    << UDZ_UDP_GRO_OFF << " uncoalesced ones";
    send_run(tx, rx.chan_addr(1), 11, 44, kChunk, kChunk, keep);
    EXPECT_GT(recv_all(tx, rx, s, 44, [](unsigned d) { return Expect{11, d, kChunk}; }), 0u);
    EXPECT_TRUE(s.guards_intact());
    keep.clear();
    singles(UDZ_UDP_GRO_PROBE);
    EXPECT_EQ(1, rx.u->chan_gro[0]) << "GRO not tried again";
    send_run(tx, rx.chan_addr(1), 12, 44, kChunk, kChunk, keep);
    EXPECT_GT(recv_all(tx, rx, s, 44, [](unsigned d) { return Expect{12, d, kChunk}; }), 0u);
    EXPECT_TRUE(s.guards_intact());
}


/* ---- the wire table (udz_wire.h): what the glue calls ---- */

/* Every built-in wire fills every operation and states limits the core can work with. */
TEST(UdzWires, EveryWireFillsTheTable)
{
    ASSERT_NE(nullptr, udz_wires[0]);
    EXPECT_EQ(&udz_udp_wire, udz_wires[0]);
    for (const udz_wire_ops_t *const *w = udz_wires; *w != nullptr; ++w) {
        const udz_wire_ops_t &o = **w;
        SCOPED_TRACE(o.name);
        EXPECT_GE(o.max_dgram, UDZ_HDR_LEN + 256u);
        EXPECT_GE(o.run_bytes, 1u);
        EXPECT_GE(o.run_dgrams, 1u);
        EXPECT_GT(o.dev_addr_len + o.iface_addr_len, 0u);
        EXPECT_TRUE(o.dev_mtu && o.query_devices && o.open && o.close && o.query &&
                    o.dev_addr_pack && o.iface_addr_pack && o.addr_unpack && o.is_reachable &&
                    o.send && o.recv && o.chan_id && o.chan_addr && o.chan_recv && o.chan_send);
    }
}

int collect(void *arg, const char *dev)
{
    static_cast<std::vector<std::string>*>(arg)->push_back(dev);
    return 0;
}

/* The glue's path through the table on loopback: devices, limits, open, the addresses UCP
 * exchanges, reachability, a datagram between two wires, close. */
TEST(UdzWires, UdpTableOnLoopback)
{
    const udz_wire_ops_t &o = udz_udp_wire;
    std::vector<std::string> devs;
    ASSERT_EQ(0, o.query_devices(collect, &devs));
    ASSERT_NE(devs.end(), std::find(devs.begin(), devs.end(), "lo"));
    EXPECT_EQ(&udz_udp_wire, udz_wire_find("lo"));
    EXPECT_EQ(nullptr, udz_wire_find("udz-no-such-dev"));
    EXPECT_EQ(65507u, o.max_dgram);
    size_t mtu = o.dev_mtu("lo");
    EXPECT_TRUE((mtu == 0) || (mtu > UDZ_HDR_LEN)) << mtu;

    char err[256] = "";
    void *w = nullptr;
    udz_wire_params_t p = {2, 1 << 20, 1 << 20, 1, NULL};
    EXPECT_EQ(-ENODEV, o.open("udz-no-such-dev", &p, &w, err, sizeof(err)));
    EXPECT_NE(nullptr, strstr(err, "no IPv4 address")) << err;
    void *a = nullptr, *b = nullptr;
    ASSERT_EQ(0, o.open("lo", &p, &a, err, sizeof(err))) << err;
    ASSERT_EQ(0, o.open("lo", &p, &b, err, sizeof(err))) << err;
    udz_wire_attr_t attr;
    o.query(a, &attr);
    EXPECT_GT(attr.rx_buffer, 0u);
    EXPECT_NE(nullptr, strstr(attr.desc, "127.0.0.1:")) << attr.desc;

    /* b's addresses, unpacked at a, name b's control socket */
    std::vector<uint8_t> dev(o.dev_addr_len), ifa(o.iface_addr_len);
    o.dev_addr_pack(b, dev.data());
    o.iface_addr_pack(b, ifa.data());
    udz_addr_t to_b, b_ctrl;
    udz_chans_t chans_b;
    o.addr_unpack(dev.data(), ifa.data(), &to_b, &chans_b);
    udz_udp_addr_make(static_cast<udz_udp_t*>(b)->ip, static_cast<udz_udp_t*>(b)->port, &b_ctrl);
    EXPECT_EQ(0, memcmp(&to_b, &b_ctrl, sizeof(to_b)));
    EXPECT_TRUE(o.is_reachable(a, dev.data(), 1));
    EXPECT_FALSE(o.is_reachable(a, dev.data(), 0)) << "loopback of another host or namespace";

    /* a datagram from a's control socket to b's, and the sender it names */
    uint8_t out[48], in[64];
    for (size_t i = 0; i < sizeof(out); ++i) {
        out[i] = (uint8_t)(i * 3 + 1);
    }
    udz_txmsg_t m;
    m.iov[0].iov_base = out;
    m.iov[0].iov_len  = sizeof(out);
    m.iovcnt          = 1;
    ASSERT_EQ(1, o.send(a, &to_b, &m, 1));
    udz_rxmsg_t r;
    memset(&r, 0, sizeof(r));
    r.iov[0].iov_base = in;
    r.iov[0].iov_len  = sizeof(in);
    int got = 0;
    for (int tries = 0; (got == 0) && (tries < 2000); ++tries) {
        struct pollfd pf = {static_cast<udz_udp_t*>(b)->fd, POLLIN, 0};
        poll(&pf, 1, 1);
        got = o.recv(b, &r, 1);
    }
    ASSERT_EQ(1, got);
    EXPECT_EQ(sizeof(out), r.len);
    /* in the slot's area, or lent whole in the wire's buffer (udz_wire.h recv) */
    EXPECT_TRUE((r.iov[0].iov_base == in) || (r.iov[0].iov_len == sizeof(out)));
    EXPECT_EQ(0, memcmp(out, r.iov[0].iov_base, sizeof(out)));
    dev.assign(o.dev_addr_len, 0);
    ifa.assign(o.iface_addr_len, 0);
    o.dev_addr_pack(a, dev.data());
    o.iface_addr_pack(a, ifa.data());
    udz_addr_t a_ctrl;
    udz_chans_t chans_a;
    o.addr_unpack(dev.data(), ifa.data(), &a_ctrl, &chans_a);
    EXPECT_EQ(0, memcmp(&a_ctrl, &r.src, sizeof(a_ctrl)));

    /* a data channel's id, turned into an address by the owner, reaches that channel */
    udz_addr_t ch;
    udz_udp_t *ub = static_cast<udz_udp_t*>(b);
    EXPECT_EQ(ub->nchan, chans_b.b[0]) << "b's address announces its channels";
    ASSERT_EQ(0, o.chan_addr(a, &to_b, &chans_b, o.chan_id(b, 1), &ch));
    udz_addr_t want;
    udz_udp_addr_make(ub->ip, ub->chan_port[1], &want);
    EXPECT_EQ(0, memcmp(&want, &ch, sizeof(ch)));
    /* and nothing else: an index past them, a port, none announced */
    EXPECT_EQ(-EINVAL, o.chan_addr(a, &to_b, &chans_b, ub->nchan, &ch));
    EXPECT_EQ(-EINVAL, o.chan_addr(a, &to_b, &chans_b, ntohs(ub->chan_port[1]), &ch));
    EXPECT_EQ(-EINVAL, o.chan_addr(a, &to_b, &chans_b, 0xffffffffu, &ch));
    udz_chans_t none;
    memset(&none, 0, sizeof(none));
    EXPECT_EQ(-ENOENT, o.chan_addr(a, &to_b, &none, 0, &ch));
    /* an address that announces more than a wire opens, or ports past 65535, announces none */
    ifa[2] = UDZ_MAX_CHANNELS + 1;
    o.addr_unpack(dev.data(), ifa.data(), &a_ctrl, &chans_a);
    EXPECT_EQ(0, chans_a.b[0]);
    uint16_t high = htons(65530);
    memcpy(ifa.data(), &high, 2);
    ifa[2] = 8;
    o.addr_unpack(dev.data(), ifa.data(), &a_ctrl, &chans_a);
    EXPECT_EQ(0, chans_a.b[0]);
    o.close(a);
    o.close(b);
}

/* The control socket's idle polls (udz_udp_ready.c): once idle, a poll that finds nothing costs
 * no system call; whatever arrives is still received, by the first poll after it, and bursts
 * longer than a receive batch come whole. Where the kernel refuses the ring, every poll is a
 * receive (the same results, nothing free). */
TEST(UdzUdpIdle, PollsWithoutSyscallAndMissesNothing)
{
    const udz_wire_ops_t &o = udz_udp_wire;
    udz_wire_counters_t cnt_a = {}, cnt_b = {};
    udz_wire_params_t pa = {1, 1 << 20, 1 << 20, 0, &cnt_a};
    udz_wire_params_t pb = {1, 1 << 20, 1 << 20, 0, &cnt_b};
    char err[256] = "";
    void *a = nullptr, *b = nullptr;
    ASSERT_EQ(0, o.open("lo", &pa, &a, err, sizeof(err))) << err;
    ASSERT_EQ(0, o.open("lo", &pb, &b, err, sizeof(err))) << err;
    udz_udp_t *ub = static_cast<udz_udp_t*>(b);
    bool ring = ub->ready.fd >= 0;
    udz_wire_attr_t attr;
    o.query(b, &attr);
    EXPECT_NE(nullptr, strstr(attr.desc, ring ? "idle ring io_uring" : "idle ring none"))
        << attr.desc;

    std::vector<uint8_t> dev(o.dev_addr_len), ifa(o.iface_addr_len);
    o.dev_addr_pack(b, dev.data());
    o.iface_addr_pack(b, ifa.data());
    udz_addr_t to_b;
    udz_chans_t chans_b;
    o.addr_unpack(dev.data(), ifa.data(), &to_b, &chans_b);

    uint8_t in[UDZ_UDP_BATCH][16];
    udz_rxmsg_t r[UDZ_UDP_BATCH];
    auto arm_slots = [&]() {
        memset(r, 0, sizeof(r));
        for (int i = 0; i < UDZ_UDP_BATCH; ++i) {
            r[i].iov[0].iov_base = in[i];
            r[i].iov[0].iov_len  = sizeof(in[i]);
        }
    };
    auto send_n = [&](int n, uint32_t first) {
        for (int i = 0; i < n; ++i) {
            uint32_t v = first + (uint32_t)i;
            udz_txmsg_t m;
            m.iov[0].iov_base = &v;
            m.iov[0].iov_len  = sizeof(v);
            m.iovcnt          = 1;
            ASSERT_EQ(1, o.send(a, &to_b, &m, 1));
        }
    };

    for (int round = 0; round < 20; ++round) {
        /* idle: many empty polls; past the first UDZ_READY_IDLE_POLLS none enters the kernel */
        uint64_t calls0 = cnt_b.ctl_recv_calls, free0 = cnt_b.idle_polls_free;
        for (int i = 0; i < 1000; ++i) {
            arm_slots();
            ASSERT_EQ(0, o.recv(b, r, UDZ_UDP_BATCH));
        }
        if (ring) {
            EXPECT_LE(cnt_b.ctl_recv_calls - calls0, (uint64_t)UDZ_READY_IDLE_POLLS + 1);
            EXPECT_GE(cnt_b.idle_polls_free - free0, 1000u - UDZ_READY_IDLE_POLLS - 1);
        } else {
            EXPECT_EQ(1000u, cnt_b.ctl_recv_calls - calls0);
        }
        /* a burst longer than a batch (round 0: one datagram) arrives while b is idle: all of
         * it is received, in order, and nothing twice */
        int n = (round == 0) ? 1 : 1 + (round * 13) % (2 * UDZ_UDP_BATCH + 5);
        send_n(n, (uint32_t)round << 16);
        int got = 0;
        for (int spins = 0; (got < n) && (spins < 200000); ++spins) {
            arm_slots();
            int k = o.recv(b, r, UDZ_UDP_BATCH);
            ASSERT_GE(k, 0);
            for (int i = 0; i < k; ++i) {
                uint32_t v;
                ASSERT_EQ(sizeof(v), r[i].len);
                memcpy(&v, in[i], sizeof(v));
                ASSERT_EQ(((uint32_t)round << 16) + (uint32_t)got, v) << "round " << round;
                ++got;
            }
        }
        ASSERT_EQ(n, got) << "round " << round << ": the idle ring missed a wakeup";
    }
    o.close(a);
    o.close(b);
}

/* The control socket with UDP_GRO: GSO runs (a message's stream packets, udz_stream.c) reach
 * it whole and are cut into the core's one-area-per-datagram slots, each lent its datagram in
 * the wire's buffer (no copy; the slots' own areas stay untouched). With few slots per call a
 * run spans calls: nothing is lost, every datagram comes in order, whole, with its sender; the
 * wire is not idle and its event fd is readable while it holds the rest of a run; a datagram
 * larger than its slot is reported truncated at the slot's length. */
TEST(UdzUdpCtlGro, RunsCutIntoSlotsAcrossCalls)
{
    Wire tx(0, 0), rx(0, 1);
    if (!rx.u->ctl_gro) {
        GTEST_SKIP() << "kernel without UDP_GRO";
    }
    ASSERT_TRUE(tx.u->gso) << "the sender needs UDP GSO for runs";
    int efd = udz_udp_wire.event_fd(rx.u);
    ASSERT_GE(efd, 0);
    udz_addr_t to_rx, from_tx;
    udz_udp_addr_make(rx.u->ip, rx.u->port, &to_rx);
    udz_udp_addr_make(tx.u->ip, tx.u->port, &from_tx);

    /* three runs (40 x 1400 B, the last 1000 B; 7 x 1400 B; 44 x 1472 B, the last 9 B), then
     * five small single datagrams */
    struct Run { unsigned n; size_t len, last; };
    const Run runs[] = {{40, 1400, 1000}, {7, 1400, 1400}, {44, 1472, 9}, {1, 16, 16}, {1, 17, 17},
                        {1, 18, 18}, {1, 19, 19}, {1, 20, 20}};
    std::vector<std::vector<uint8_t>> keep;
    std::vector<size_t> want_len;
    std::vector<std::pair<unsigned, unsigned>> want_id;
    unsigned r = 0;
    for (const Run &run : runs) {
        std::vector<udz_txmsg_t> m(run.n);
        for (unsigned i = 0; i < run.n; ++i) {
            size_t len = (i + 1 == run.n) ? run.last : run.len;
            keep.emplace_back(len);
            for (size_t o = 0; o < len; ++o) {
                keep.back()[o] = pattern(r, i, o);
            }
            m[i].iov[0].iov_base = keep.back().data();
            m[i].iov[0].iov_len  = len;
            m[i].iovcnt          = 1;
            want_len.push_back(len);
            want_id.emplace_back(r, i);
        }
        ASSERT_EQ((int)run.n, udz_udp_wire.send(tx.u, &to_rx, m.data(), (int)run.n));
        ++r;
    }

    constexpr size_t kArea = 1500;
    constexpr int kFew     = 3;
    std::vector<uint8_t> mem(kFew * (kArea + 2 * kGuard));
    udz_rxmsg_t msgs[kFew];
    size_t got = 0;
    bool held_seen = false, coalesced = false;
    for (int spins = 0; (got < want_len.size()) && (spins < 100000); ++spins) {
        std::fill(mem.begin(), mem.end(), kCanary);
        memset(msgs, 0, sizeof(msgs));
        for (int i = 0; i < kFew; ++i) {
            msgs[i].iov[0].iov_base = &mem[i * (kArea + 2 * kGuard) + kGuard];
            msgs[i].iov[0].iov_len  = kArea;
        }
        int k = udz_udp_wire.recv(rx.u, msgs, kFew);
        ASSERT_GE(k, 0);
        ASSERT_LE(k, kFew);
        for (int c = 0; c < rx.u->ctl_n; ++c) {
            coalesced |= (rx.u->ctl_seg[c] > 0);
        }
        for (int i = 0; i < k; ++i, ++got) {
            ASSERT_LT(got, want_len.size()) << "more datagrams than sent";
            ASSERT_EQ(want_len[got], msgs[i].len) << "datagram " << got;
            ASSERT_EQ(0, msgs[i].trunc);
            ASSERT_EQ(0, msgs[i].unreach);
            ASSERT_EQ(0, memcmp(&from_tx, &msgs[i].src, sizeof(from_tx)));
            /* lent in place: the datagram whole where iov[0] points, outside the slot */
            const uint8_t *p = static_cast<const uint8_t*>(msgs[i].iov[0].iov_base);
            ASSERT_EQ(msgs[i].len, msgs[i].iov[0].iov_len);
            ASSERT_TRUE((p < mem.data()) || (p >= mem.data() + mem.size()));
            for (size_t o = 0; o < msgs[i].len; ++o) {
                ASSERT_EQ(pattern(want_id[got].first, want_id[got].second, o), p[o])
                    << "run " << want_id[got].first << " datagram " << want_id[got].second
                    << " byte " << o;
            }
        }
        /* and nothing was written into the slots' own areas */
        for (size_t b = 0; b < mem.size(); ++b) {
            ASSERT_EQ(kCanary, mem[b]) << "slot memory written at " << b;
        }
        if (udz_udp_ctl_pending(rx.u)) {
            held_seen = true;
            EXPECT_EQ(0, udz_udp_wire.rx_idle(rx.u)) << "idle while holding datagrams";
            struct pollfd pfd = {efd, POLLIN, 0};
            EXPECT_EQ(1, poll(&pfd, 1, 0)) << "event fd not readable while holding datagrams";
        }
    }
    ASSERT_EQ(want_len.size(), got);
    EXPECT_TRUE(held_seen) << "a run longer than the slots should be held across calls";
    EXPECT_TRUE(coalesced) << "no run came coalesced (GSO across loopback)";
    EXPECT_EQ(0u, rx.u->ctl_dropped);
    /* drained: the event fd's extra readiness is gone */
    udz_rxmsg_t one[1];
    uint8_t area[64];
    memset(one, 0, sizeof(one));
    one[0].iov[0].iov_base = area;
    one[0].iov[0].iov_len  = sizeof(area);
    EXPECT_EQ(0, udz_udp_wire.recv(rx.u, one, 1));
    struct pollfd pfd = {efd, POLLIN, 0};
    EXPECT_EQ(0, poll(&pfd, 1, 0)) << "event fd readable with nothing to receive";

    /* a datagram larger than its slot: truncated, nothing past the slot */
    std::vector<uint8_t> big(1200, 0x5a);
    udz_txmsg_t bm[2];
    for (int i = 0; i < 2; ++i) {
        bm[i].iov[0].iov_base = big.data();
        bm[i].iov[0].iov_len  = big.size();
        bm[i].iovcnt          = 1;
    }
    ASSERT_EQ(2, udz_udp_wire.send(tx.u, &to_rx, bm, 2));
    int seen = 0;
    for (int spins = 0; (seen < 2) && (spins < 100000); ++spins) {
        uint8_t small[100 + 2 * kGuard];
        memset(small, kCanary, sizeof(small));
        memset(one, 0, sizeof(one));
        one[0].iov[0].iov_base = small + kGuard;
        one[0].iov[0].iov_len  = 100;
        int k = udz_udp_wire.recv(rx.u, one, 1);
        ASSERT_GE(k, 0);
        if (k == 1) {
            EXPECT_EQ(1, one[0].trunc);
            EXPECT_EQ(100u, one[0].len);
            EXPECT_EQ(100u, one[0].iov[0].iov_len);
            for (size_t g = 0; g < sizeof(small); ++g) {
                ASSERT_EQ(kCanary, small[g]);   /* lent, not scattered: the slot untouched */
            }
            ++seen;
        }
    }
    EXPECT_EQ(2, seen);
}

/* Odd receives of the GRO control socket: truncated, a UDP_GRO cmsg too short, gso_size 0 or
 * beyond the run are dropped (-1); no cmsg or gso_size == the run: one datagram. */
TEST(UdzUdpCtlGro, OddCmsgDropped)
{
    union { struct cmsghdr h; uint64_t a[8]; } cb;
    struct msghdr mh;
    auto make = [&](int gso, size_t cmsg_data, int flags) {
        memset(&mh, 0, sizeof(mh));
        memset(&cb, 0, sizeof(cb));
        mh.msg_control    = &cb;
        mh.msg_controllen = CMSG_SPACE(sizeof(int));
        mh.msg_flags      = flags;
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_UDP;
        cm->cmsg_type  = UDP_GRO;
        cm->cmsg_len   = CMSG_LEN(cmsg_data);
        memcpy(CMSG_DATA(cm), &gso, sizeof(gso));
    };
    make(1400, sizeof(int), 0);
    EXPECT_EQ(1400, udz_udp_ctl_seg(&mh, 5000));
    make(5000, sizeof(int), 0);
    EXPECT_EQ(0, udz_udp_ctl_seg(&mh, 5000));
    make(0, sizeof(int), 0);
    EXPECT_EQ(-1, udz_udp_ctl_seg(&mh, 5000));
    make(-5, sizeof(int), 0);
    EXPECT_EQ(-1, udz_udp_ctl_seg(&mh, 5000));
    make(6000, sizeof(int), 0);
    EXPECT_EQ(-1, udz_udp_ctl_seg(&mh, 5000));
    make(1400, 2, 0);
    EXPECT_EQ(-1, udz_udp_ctl_seg(&mh, 5000));
    make(1400, sizeof(int), MSG_TRUNC);
    EXPECT_EQ(-1, udz_udp_ctl_seg(&mh, 5000));
    make(1400, sizeof(int), MSG_CTRUNC);
    EXPECT_EQ(-1, udz_udp_ctl_seg(&mh, 5000));
    memset(&mh, 0, sizeof(mh));
    EXPECT_EQ(0, udz_udp_ctl_seg(&mh, 300));
}

INSTANTIATE_TEST_SUITE_P(Wire, UdzUdpGro, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int> &i) {
                             return i.param ? std::string("gro") : std::string("recvmmsg");
                         });

} // namespace
