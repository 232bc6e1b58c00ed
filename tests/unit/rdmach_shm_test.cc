// Unit tier for the rdmach shared-memory segment (uct/rdmach/rdmach_shm.[ch]) and the wire over
// it (rdmach_wire_shm.c, driven through the wire table as the glue drives it). A peer's segment
// is validated before use, and a segment's owner never takes its layout from the shared header,
// which every peer can write.
#include "rdmach_shm.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>

namespace {

struct Seg {
    Seg()
    {
        EXPECT_EQ(nullptr, rdmach_geom_init(&geom, 256, 64, 4096, 0.25));
        EXPECT_EQ(0, rdmach_shm_create(&own, &geom, nullptr, 0, 8, 0x1234));
    }
    ~Seg() { rdmach_shm_detach(&own); }
    rdmach_geom_t geom{};
    rdmach_shm_seg_t own{};
};

}  // namespace

TEST(RdmachShm, AttachValidatesOwnerAndLayout)
{
    Seg s;
    rdmach_shm_seg_t peer{};

    ASSERT_EQ(0, rdmach_shm_attach(&peer, getpid(), s.own.fd, 0x1234));
    EXPECT_EQ(s.own.rings_off, peer.rings_off);
    EXPECT_EQ(s.own.max_rings, peer.max_rings);
    // the peer mapping sees the owner's stores
    rdmach_shm_ring_ctl(&s.own, 3)->rx_hot = 7;
    EXPECT_EQ(7u, rdmach_shm_ring_ctl(&peer, 3)->rx_hot);
    rdmach_shm_detach(&peer);

    EXPECT_EQ(-EPROTO, rdmach_shm_attach(&peer, getpid(), s.own.fd, 0x9999)) << "wrong seg id";
    EXPECT_NE(0, rdmach_shm_attach(&peer, getpid(), 987654, 0x1234)) << "no such fd";
}

TEST(RdmachShm, CorruptSharedHeaderIsRefusedAndNeverSteersTheOwner)
{
    Seg s;
    rdmach_shm_seg_t peer{};
    rdmach_ring_ctl_t *before = rdmach_shm_ring_ctl(&s.own, 5);

    // a peer scribbles over the header: offsets, geometry, ring counter
    s.own.hdr->rings_off   = 1ull << 40;
    s.own.hdr->ring_stride = 12345;
    EXPECT_EQ(-EPROTO, rdmach_shm_attach(&peer, getpid(), s.own.fd, 0x1234));
    s.own.hdr->slot_size = 100;
    EXPECT_EQ(-EPROTO, rdmach_shm_attach(&peer, getpid(), s.own.fd, 0x1234));
    s.own.hdr->next_ring = 0xffffffffu;

    // the owner keeps using its private layout, and clamps the shared ring counter
    EXPECT_EQ(before, rdmach_shm_ring_ctl(&s.own, 5));
    EXPECT_EQ(8u, rdmach_shm_claimed(&s.own));
    before->owner = 0;   // still inside the mapping: ASan/segfault would say otherwise
}

// A geometry beyond rdmach_geom_init's bounds whose layout wraps: 2^31 slots of 2^31 bytes
// make a ring of 2^62 bytes, a stride of 2^62 and a page, and 4 rings of it wrap to 4 pages.
// A header that states those offsets itself, in a segment that holds the wrapped size, would
// match the recomputed layout and put ring 1 at 2^62 bytes past the mapping: refused before
// anything is multiplied.
TEST(RdmachShm, AGeometryWhoseLayoutWouldWrapIsRefused)
{
    rdmach_geom_t geom{};
    rdmach_shm_seg_t seg{}, peer{};

    ASSERT_EQ(nullptr, rdmach_geom_init(&geom, 256, 64, 4096, 0.25));
    ASSERT_EQ(0, rdmach_shm_create(&seg, &geom, nullptr, 0, 4, 0x4343));
    rdmach_shm_hdr_t *h = seg.hdr;
    const uint64_t page = 4096;
    h->slot_size   = 1u << 31;
    h->nslots      = 1u << 31;
    h->ring_stride = (1ull << 62) + ((sizeof(rdmach_ring_ctl_t) + page - 1) & ~(page - 1));
    h->size        = h->rings_off + 4 * h->ring_stride;   // wraps, on purpose
    ASSERT_LE(h->size, seg.size) << "the wrapped layout fits the mapping";
    int ret = rdmach_shm_attach(&peer, getpid(), seg.fd, 0x4343);
    EXPECT_EQ(-EPROTO, ret) << "a wrapped layout was accepted";
    if (ret == 0) {
        rdmach_shm_detach(&peer);
    }

    // the reviewer's numbers (a wrapped size of some 128 GiB, for a sparse memfd), and each
    // bound of rdmach_geom_init alone
    h->slot_size = 2863311552u;
    h->max_rings = 3;
    EXPECT_EQ(-EPROTO, rdmach_shm_attach(&peer, getpid(), seg.fd, 0x4343));
    h->max_rings = 4;
    h->nslots    = 64;
    h->slot_size = 2u << 20;      // slots of 2 MiB
    EXPECT_EQ(-EPROTO, rdmach_shm_attach(&peer, getpid(), seg.fd, 0x4343));
    h->slot_size = 256;
    h->nslots    = 1u << 25;      // 2^25 slots
    EXPECT_EQ(-EPROTO, rdmach_shm_attach(&peer, getpid(), seg.fd, 0x4343));
    h->nslots    = 64;
    h->max_span  = 1u << 17;      // a span no ring can have
    EXPECT_EQ(-EPROTO, rdmach_shm_attach(&peer, getpid(), seg.fd, 0x4343));
    h->max_span  = geom.max_span;
    h->ring_stride = seg.ring_stride;
    h->size        = seg.rings_off + 4 * seg.ring_stride;
    EXPECT_EQ(0, rdmach_shm_attach(&peer, getpid(), seg.fd, 0x4343)) << "restored: accepted";
    rdmach_shm_detach(&peer);
    rdmach_shm_detach(&seg);
}

// ---- the shared-memory wire behind the wire table (rdmach_wire_shm.c) ----
//
// Two ifaces of one process, each with its own wire: everything the UCT glue does with a wire
// (address, attach, claim, activate, the ring through it, credit return, RMA) on real segments.

#include "rdmach_wire.h"

#include <cstdarg>
#include <string>
#include <vector>

namespace {

std::vector<std::string> wire_log;

void capture_log(int error, const char *fmt, ...)
{
    char msg[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    wire_log.push_back(std::string(error ? "E " : "D ") + msg);
}

// What a wire's complete() reported: comp is a Done.
struct Done {
    int calls = 0, err = 1;
    std::vector<int> *order = nullptr;   // ids of the completions, in order
    int id = 0;
    static void cb(void *comp, int err)
    {
        Done *d = static_cast<Done*>(comp);
        ++d->calls;
        d->err = err;
        if (d->order != nullptr) {
            d->order->push_back(d->id);
        }
    }
};

int may_read_all(void *, uint64_t, uint64_t) { return 1; }

struct Wire {
    // stage_max: staged gets up to that size (rdmach_shm.h), every range ours to stage
    explicit Wire(uint32_t max_rings = 4, uint32_t max_peers = 8, uint64_t uuid = 0x5eed,
                  uint32_t large_rings = 0, size_t stage_max = 0)
    {
        params.stage_max = stage_max;
        params.may_read  = may_read_all;
        EXPECT_EQ(nullptr, rdmach_geom_init(&params.geom, 256, 64, 4096, 0.25));
        EXPECT_EQ(nullptr, rdmach_geom_init(&params.geom_large, 256, 256, 4096, 0.25));
        params.large_rings = large_rings;
        params.dev_name  = "memory";
        params.max_rings = max_rings;
        params.max_peers = max_peers;
        params.uuid      = uuid;
        params.stats     = &stats;
        params.wire_stats = &wire_stats;
        params.log       = capture_log;
        params.complete  = Done::cb;
        EXPECT_EQ(0, ops->open(&params, &w));
        addr.resize(ops->iface_addr_len);
        ops->pack_addr(w, addr.data());
    }
    ~Wire()
    {
        if (w != nullptr) {
            ops->close(w);
        }
    }

    const rdmach_wire_ops_t *ops = &rdmach_wire_shm_ops;
    rdmach_wire_params_t params{};
    rdmach_rx_stats_t stats{};
    rdmach_wire_stats_t wire_stats{};
    rdmach_wire_t *w = nullptr;
    std::vector<uint8_t> addr;
};

struct Got {
    std::vector<std::string> msgs;
    static void cb(void *arg, const rdmach_rx_t *, uint8_t, void *data, uint32_t len)
    {
        static_cast<Got*>(arg)->msgs.emplace_back(static_cast<char*>(data), len);
    }
};

bool send(rdmach_tx_t *tx, const std::string &s)
{
    rdmach_rec_hdr_t *rec = rdmach_tx_reserve(tx, s.size());
    if (rec == nullptr) {
        return false;
    }
    memcpy(rec + 1, s.data(), s.size());
    rdmach_tx_commit(tx, rec, 3, static_cast<uint32_t>(s.size()));
    return true;
}

}  // namespace

TEST(RdmachWireShm, TableShape)
{
    const rdmach_wire_ops_t *ops = &rdmach_wire_shm_ops;
    rdmach_wire_dev_t devs[4];

    ASSERT_EQ(1u, ops->query_devices(nullptr, devs, 4));
    EXPECT_STREQ("memory", devs[0].name);
    EXPECT_EQ(RDMACH_WIRE_DEV_SHM, devs[0].type);
    EXPECT_EQ(0u, ops->query_devices(nullptr, devs, 0));
    // the message path stays stores into mapped memory: no hook; progress is both sides of
    // cooperative zero copies, flush (and the glue's fence) wait for those posted with a
    // completion
    EXPECT_EQ(nullptr, ops->ring.post_record);
    EXPECT_EQ(nullptr, ops->ring.post_tail);
    EXPECT_EQ(nullptr, ops->ring.post_hot);
    EXPECT_NE(nullptr, ops->progress);
    EXPECT_NE(nullptr, ops->flush);
    EXPECT_EQ(1, ops->fence_query);
    EXPECT_EQ(0u, ops->dev_addr_len);
    EXPECT_EQ(16u, ops->iface_addr_len);   // pid, memfd, segment id

    // an iface opened on "memory" runs this wire; no wire serves an unknown device
    EXPECT_EQ(ops, rdmach_wire_find("memory"));
    EXPECT_EQ(nullptr, rdmach_wire_find("mlx5_0:1"));
    EXPECT_EQ(ops, rdmach_wires[0]);
}

TEST(RdmachWireShm, ConnectSendActivateReceiveAndReturnCredit)
{
    Wire rx_side, tx_side;
    rdmach_wire_addr_t info;
    rdmach_wire_peer_t *peer = nullptr;
    rdmach_tx_t tx{};
    rdmach_rx_t rx{};
    uint32_t id = 99;
    Got got;

    ASSERT_EQ(0, tx_side.ops->unpack_addr(tx_side.w, nullptr, rx_side.addr.data(), &info));
    EXPECT_EQ(getpid(), info.pid);
    EXPECT_EQ("pid " + std::to_string(getpid()), info.name);

    ASSERT_EQ(0, tx_side.ops->attach(tx_side.w, rx_side.addr.data(), &peer));
    EXPECT_EQ(rx_side.params.geom.slot_size, peer->geom.slot_size);
    EXPECT_EQ(rx_side.params.geom.max_span, peer->geom.max_span);
    EXPECT_EQ(4u, peer->max_rings);
    rdmach_wire_peer_t *again = nullptr;
    ASSERT_EQ(0, tx_side.ops->attach(tx_side.w, rx_side.addr.data(), &again));
    EXPECT_EQ(peer, again) << "a peer is mapped once";

    // nothing claimed yet: the receiver sees no ring
    EXPECT_EQ(0u, *rx_side.w->next_ring);
    ASSERT_EQ(0, tx_side.ops->claim(tx_side.w, peer, &tx, &id));
    EXPECT_EQ(0u, id);
    EXPECT_EQ(1u, tx_side.w->next_credit);
    EXPECT_EQ(1u, *rx_side.w->next_ring);
    EXPECT_EQ(&rdmach_wire_shm_ops.ring, tx.ops);

    ASSERT_TRUE(send(&tx, "hello"));
    ASSERT_TRUE(send(&tx, "world"));
    EXPECT_EQ(1, rx_side.w->doorbells[0]) << "a new ring is cold: the sender rings";

    int32_t sender = 0;
    EXPECT_EQ(-ENOENT, rx_side.ops->ring_sender(rx_side.w, 0, &sender)) << "not activated";
    ASSERT_EQ(1, rx_side.ops->activate(rx_side.w, 0, &rx));
    // served requests reply only to the ring's owner, as the wire mapped it
    ASSERT_EQ(0, rx_side.ops->ring_sender(rx_side.w, 0, &sender));
    EXPECT_EQ(getpid(), sender);
    EXPECT_EQ(-ENOENT, rx_side.ops->ring_sender(rx_side.w, 1, &sender)) << "never claimed";
    EXPECT_EQ(-ENOENT, rx_side.ops->ring_sender(rx_side.w, UINT32_MAX, &sender));
    EXPECT_EQ(2u, rdmach_rx_poll(&rx, 16, &Got::cb, &got,
                                 &rx_side.stats));
    EXPECT_EQ((std::vector<std::string>{"hello", "world"}), got.msgs);

    // the receiver's credit lands in the sender's credit line, which its tx reads
    rdmach_rx_return_credit(&rx, &rx_side.stats);
    rdmach_tx_refresh_tail(&tx);
    EXPECT_EQ(2u, tx.cached_tail);
    EXPECT_EQ(0u, rx_side.stats.corrupt);
}

TEST(RdmachWireShm, ActivateWaitsForTheDescriptionAndCountsABadCreditLine)
{
    Wire rx_side, tx_side;
    rdmach_wire_peer_t *peer = nullptr;
    rdmach_tx_t tx{};
    rdmach_rx_t rx{};
    uint32_t id;
    Got got;

    ASSERT_EQ(0, tx_side.ops->attach(tx_side.w, rx_side.addr.data(), &peer));
    ASSERT_EQ(0, tx_side.ops->claim(tx_side.w, peer, &tx, &id));

    // a sender that bumped the counter but has not published its description yet
    __atomic_fetch_add(rx_side.w->next_ring, 1, __ATOMIC_RELAXED);
    EXPECT_EQ(0, rx_side.ops->activate(rx_side.w, 1, &rx));

    // a description naming a credit line beyond the sender's segment: records are still
    // delivered, the credit goes nowhere, and the bad description is counted
    ASSERT_TRUE(send(&tx, "x"));
    tx.ctl->peer_info[1] |= 0xffffull << 32;
    ASSERT_EQ(1, rx_side.ops->activate(rx_side.w, 0, &rx));
    EXPECT_EQ(1u, rx_side.stats.corrupt);
    EXPECT_EQ(1u, rdmach_rx_poll(&rx, 16, &Got::cb, &got, &rx_side.stats));
    rdmach_rx_return_credit(&rx, &rx_side.stats);
    rdmach_tx_refresh_tail(&tx);
    EXPECT_EQ(0u, tx.cached_tail);
}

TEST(RdmachWireShm, LimitsAndBadAddresses)
{
    Wire rx_side(2), tx_side(4, 1);
    rdmach_wire_peer_t *peer = nullptr;
    rdmach_wire_addr_t info;
    rdmach_tx_t tx{};
    uint32_t id;

    // the receiver has two rings
    ASSERT_EQ(0, tx_side.ops->attach(tx_side.w, rx_side.addr.data(), &peer));
    EXPECT_EQ(0, tx_side.ops->claim(tx_side.w, peer, &tx, &id));
    EXPECT_EQ(0, tx_side.ops->claim(tx_side.w, peer, &tx, &id));
    EXPECT_EQ(-ENOSPC, tx_side.ops->claim(tx_side.w, peer, &tx, &id));
    EXPECT_EQ(2u, tx_side.w->next_credit) << "a refused claim takes no credit line";

    // the sender's credit lines run out
    tx_side.w->next_credit = tx_side.w->max_rings;
    EXPECT_EQ(-ENOBUFS, tx_side.ops->claim(tx_side.w, peer, &tx, &id));

    // the sender maps one peer at most
    Wire other(2, 8, 0x7777);
    wire_log.clear();
    EXPECT_EQ(-ENOSPC, tx_side.ops->attach(tx_side.w, other.addr.data(), &peer));
    ASSERT_EQ(1u, wire_log.size());
    EXPECT_NE(std::string::npos, wire_log[0].find("E rdmach: more than 1 peer segments mapped"));

    // addresses: implausible ones are unreachable; a wrong segment id or fd is refused at map
    std::vector<uint8_t> bad = rx_side.addr;
    int32_t neg = -1;
    memcpy(bad.data(), &neg, sizeof(neg));
    EXPECT_EQ(-EINVAL, rx_side.ops->unpack_addr(rx_side.w, nullptr, bad.data(), &info));
    bad = rx_side.addr;
    bad[8] ^= 1;   // segment id
    wire_log.clear();
    EXPECT_EQ(-EPROTO, other.ops->attach(other.w, bad.data(), &peer));
    ASSERT_EQ(1u, wire_log.size());
    EXPECT_NE(std::string::npos, wire_log[0].find("not a compatible rdmach segment"));
    bad = rx_side.addr;
    int32_t no_fd = 987654;
    memcpy(bad.data() + 4, &no_fd, sizeof(no_fd));
    EXPECT_EQ(-ENOENT, other.ops->attach(other.w, bad.data(), &peer));
}

TEST(RdmachWireShm, RmaReadsAndWritesThePeer)
{
    Wire a, b;
    rdmach_wire_peer_t *peer = nullptr;
    char remote[32] = "remote memory", local[32] = {};
    rdmach_wire_iov_t iov = {local, sizeof(local), nullptr};

    ASSERT_EQ(0, b.ops->attach(b.w, a.addr.data(), &peer));
    ASSERT_EQ(0, b.ops->rma(b.w, peer, &iov, 1, reinterpret_cast<uintptr_t>(remote), 0,
                            sizeof(remote), 0, nullptr, nullptr));
    EXPECT_STREQ("remote memory", local);

    strcpy(local, "written");
    iov = {local, 8, nullptr};
    ASSERT_EQ(0, b.ops->rma(b.w, peer, &iov, 1, reinterpret_cast<uintptr_t>(remote), 0, 8, 1,
                            nullptr, nullptr));
    EXPECT_STREQ("written", remote);

    iov = {local, 8, nullptr};
    EXPECT_EQ(-EFAULT, b.ops->rma(b.w, peer, &iov, 1, 8, 0, 8, 0, nullptr, nullptr))
        << "bad address";
}

// An iface that closes while its process lives on (an MPI process after MPI_Finalize): its
// senders keep their mapping, and the wire tells them the peer has closed (the glue then fails
// their eps); a later connection to it is refused as to a process that is gone.
TEST(RdmachWireShm, ACloseIsSeenByPeersThatStillMapTheSegment)
{
    Wire tx_side;
    auto *rx_side = new Wire(4, 8, 0x77);
    std::vector<uint8_t> addr = rx_side->addr;
    rdmach_wire_peer_t *peer = nullptr;

    ASSERT_NE(nullptr, tx_side.ops->peer_closed);
    ASSERT_EQ(0, tx_side.ops->attach(tx_side.w, addr.data(), &peer));
    EXPECT_EQ(0, tx_side.ops->peer_closed(tx_side.w, peer));
    delete rx_side;
    EXPECT_EQ(1, tx_side.ops->peer_closed(tx_side.w, peer));
    rdmach_wire_peer_t *again = nullptr;
    EXPECT_EQ(-ENOENT, tx_side.ops->attach(tx_side.w, addr.data(), &again));
}

// Connection churn: a receiver takes back the ring of a sender that has closed (after
// delivering what it wrote last), and a new sender claims that ring with nothing of the old
// one left in it; a sender gives up its ring in a receiver that has closed, and its credit line
// comes back. Memory and descriptors stay bounded however many peers come and go.
namespace {
struct Reaped {
    rdmach_rx_t *rx;
    const rdmach_geom_t *geom;
    rdmach_rx_stats_t *stats;
    Got got;
    std::vector<uint32_t> ids;
    static void drain(void *arg, uint32_t id)
    {
        auto *r = static_cast<Reaped*>(arg);
        rdmach_rx_poll(r->rx, 1000, &Got::cb, &r->got, r->stats);
        memset(r->rx, 0, sizeof(*r->rx));
        r->ids.push_back(id);
    }
};
}  // namespace

TEST(RdmachWireShm, ARingOfASenderThatClosedIsTakenBackAndClaimedAgain)
{
    Wire rx_side(1, 8, 0x11);      // one ring only: the second sender needs the first's back
    rdmach_rx_t rx{};
    Reaped r{&rx, &rx_side.params.geom, &rx_side.stats, {}, {}};
    uint32_t id = 99;

    ASSERT_NE(nullptr, rx_side.ops->reap);
    {
        Wire a(4, 8, 0x22);
        rdmach_wire_peer_t *peer = nullptr;
        rdmach_tx_t tx{};
        ASSERT_EQ(0, a.ops->attach(a.w, rx_side.addr.data(), &peer));
        ASSERT_EQ(0, a.ops->claim(a.w, peer, &tx, &id));
        EXPECT_EQ(0u, id);
        for (int i = 0; i < 50; ++i) {            // several laps: marks everywhere
            ASSERT_TRUE(send(&tx, "old" + std::to_string(i)));
            if (!rx.active) {
                ASSERT_EQ(1, rx_side.ops->activate(rx_side.w, 0, &rx));
            }
            rdmach_rx_poll(&rx, 16, &Got::cb, &r.got, &rx_side.stats);
            rdmach_rx_return_credit(&rx, &rx_side.stats);
            rdmach_tx_refresh_tail(&tx);
        }
        ASSERT_TRUE(send(&tx, "last words"));
        EXPECT_EQ(0u, rx_side.ops->reap(rx_side.w, 1, &Reaped::drain, &r)) << "a live sender";
        Wire b(4, 8, 0x33);
        rdmach_wire_peer_t *pb = nullptr;
        rdmach_tx_t tb{};
        ASSERT_EQ(0, b.ops->attach(b.w, rx_side.addr.data(), &pb));
        EXPECT_EQ(-ENOSPC, b.ops->claim(b.w, pb, &tb, &id)) << "the one ring is taken";
    }   // a and b close
    r.got.msgs.clear();
    EXPECT_EQ(1u, rx_side.ops->reap(rx_side.w, 1, &Reaped::drain, &r));
    EXPECT_EQ((std::vector<uint32_t>{0}), r.ids);
    EXPECT_EQ((std::vector<std::string>{"last words"}), r.got.msgs) << "delivered before reuse";
    EXPECT_EQ(0u, rx_side.ops->reap(rx_side.w, 1, &Reaped::drain, &r)) << "taken back once";

    Wire c(4, 8, 0x44);
    rdmach_wire_peer_t *pc = nullptr;
    rdmach_tx_t tc{};
    ASSERT_EQ(0, c.ops->attach(c.w, rx_side.addr.data(), &pc));
    ASSERT_EQ(0, c.ops->claim(c.w, pc, &tc, &id));
    EXPECT_EQ(0u, id) << "the ring taken back";
    r.got.msgs.clear();
    for (int i = 0; i < 60; ++i) {
        ASSERT_TRUE(send(&tc, "new" + std::to_string(i)));
        if (!rx.active) {
            ASSERT_EQ(1, rx_side.ops->activate(rx_side.w, 0, &rx));
        }
        rdmach_rx_poll(&rx, 16, &Got::cb, &r.got, &rx_side.stats);
        rdmach_rx_return_credit(&rx, &rx_side.stats);
        rdmach_tx_refresh_tail(&tc);
    }
    ASSERT_EQ(60u, r.got.msgs.size()) << "no record of the old sender read as the new one's";
    for (int i = 0; i < 60; ++i) {
        EXPECT_EQ("new" + std::to_string(i), r.got.msgs[i]);
    }
    EXPECT_EQ(0u, rx_side.stats.corrupt);
}

TEST(RdmachWireShm, ASenderGivesUpItsRingInAReceiverThatClosedAndGetsItsCreditLineBack)
{
    Wire tx_side(2, 8, 0x55);
    rdmach_wire_peer_t *peer = nullptr;
    rdmach_tx_t tx{};
    uint32_t id;

    for (int round = 0; round < 20; ++round) {
        auto *rx_side = new Wire(4, 8, 0x100 + round);
        ASSERT_EQ(0, tx_side.ops->attach(tx_side.w, rx_side->addr.data(), &peer));
        ASSERT_EQ(0, tx_side.ops->claim(tx_side.w, peer, &tx, &id)) << "round " << round;
        ASSERT_TRUE(send(&tx, "hi"));
        EXPECT_EQ(0, tx_side.ops->peer_closed(tx_side.w, peer));
        delete rx_side;
        EXPECT_EQ(1, tx_side.ops->peer_closed(tx_side.w, peer));
        tx_side.ops->unclaim(tx_side.w, peer, &tx);
    }
    EXPECT_EQ(1u, tx_side.w->next_credit) << "20 receivers one after another: one credit line";
}

// The resource model (perf/resource_model) sizes the shared-memory wire with the functions
// the segment's layout uses: they must agree with a live wire's segment, which is what its
// memfd holds.
TEST(RdmachWireShm, SizingMatchesTheLiveSegment)
{
    for (uint32_t rings : {1u, 4u, 64u}) {
        Wire a(rings);
        EXPECT_EQ(rdmach_shm_segment_bytes(&a.params.geom, nullptr, 0, rings), a.w->size)
            << rings;
        Wire b(rings, 8, 0x77, 2);
        EXPECT_EQ(rdmach_shm_segment_bytes(&b.params.geom, &b.params.geom_large, 2, rings),
                  b.w->size) << rings;
        EXPECT_EQ(a.w->size + std::min(rings, 2u) * (rdmach_shm_ring_stride(&b.params.geom_large) -
                                                     rdmach_shm_ring_stride(&a.params.geom)),
                  b.w->size) << rings;
        EXPECT_GE(rdmach_shm_ring_stride(&a.params.geom),
                  sizeof(rdmach_ring_ctl_t) + rdmach_geom_ring_bytes(&a.params.geom));
        EXPECT_GT(a.w->size, rings * rdmach_shm_ring_stride(&a.params.geom));
    }
}

// Large rings: the first senders to claim get the longer ring, the rest the short one; sender
// and receiver take the geometry from the ring id, records wrap each ring at its own end, and
// a peer's header that names an impossible large-ring layout is refused.
TEST(RdmachWireShm, LargeRingsGoToTheFirstSenders)
{
    Wire rx_side(4, 8, 0x5eed, 2), tx_side;
    rdmach_wire_peer_t *peer = nullptr;
    rdmach_tx_t tx[3]{};
    rdmach_rx_t rx[3]{};
    uint32_t id[3];

    ASSERT_EQ(0, tx_side.ops->attach(tx_side.w, rx_side.addr.data(), &peer));
    for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(0, tx_side.ops->claim(tx_side.w, peer, &tx[i], &id[i]));
        ASSERT_EQ(static_cast<uint32_t>(i), id[i]);
        ASSERT_EQ(1, rx_side.ops->activate(rx_side.w, id[i], &rx[i]));
        uint32_t want = (i < 2) ? 256u : 64u;
        EXPECT_EQ(want, tx[i].geom.nslots) << i;
        EXPECT_EQ(want, rx[i].geom.nslots) << i;
        EXPECT_EQ(rx[i].geom.lazy_slots, want / 4) << i;
    }
    // both ends place the rings alike (each maps the segment at its own address)
    EXPECT_EQ(rx[1].slots - rx[0].slots, tx[1].slots - tx[0].slots);
    EXPECT_EQ(rx[2].slots - rx[1].slots, tx[2].slots - tx[1].slots);
    // the rings do not overlap, and the last ends inside the segment
    EXPECT_GE(rx[1].slots, rx[0].slots + 256 * 256);
    EXPECT_GE(rx[2].slots, rx[1].slots + 256 * 256);

    // every ring laps a few times: each wraps at its own end with its own pad
    for (int i = 0; i < 3; ++i) {
        Got got;
        std::string msg(1000, static_cast<char>('a' + i));
        for (int n = 0; n < 1200; ++n) {
            ASSERT_TRUE(send(&tx[i], msg)) << i << " " << n;
            ASSERT_EQ(1u, rdmach_rx_poll(&rx[i], 16, &Got::cb, &got, &rx_side.stats));
            rdmach_rx_return_credit(&rx[i], &rx_side.stats);
            rdmach_tx_refresh_tail(&tx[i]);
        }
        EXPECT_EQ(1200u, got.msgs.size());
        EXPECT_EQ(msg, got.msgs.back());
    }
    EXPECT_EQ(0u, rx_side.stats.corrupt);

    // a header naming more large rings than rings, or a ring length that is no power of two
    rdmach_shm_seg_t seg{};
    rdmach_geom_t g{}, gl{};
    ASSERT_EQ(nullptr, rdmach_geom_init(&g, 256, 64, 4096, 0.25));
    ASSERT_EQ(nullptr, rdmach_geom_init(&gl, 256, 1024, 4096, 0.25));
    ASSERT_EQ(0, rdmach_shm_create(&seg, &g, &gl, 3, 8, 0x4242));
    EXPECT_EQ(3u, seg.large_rings);
    rdmach_shm_seg_t peer_view{};
    ASSERT_EQ(0, rdmach_shm_attach(&peer_view, getpid(), seg.fd, 0x4242));
    EXPECT_EQ(1024u, rdmach_shm_ring_geom(&peer_view, 2)->nslots);
    EXPECT_EQ(64u, rdmach_shm_ring_geom(&peer_view, 3)->nslots);
    EXPECT_EQ(rdmach_shm_ring_ctl(&seg, 7), rdmach_shm_ring_ctl(&peer_view, 7) -
              (reinterpret_cast<char*>(peer_view.hdr) - reinterpret_cast<char*>(seg.hdr)) /
              static_cast<ptrdiff_t>(sizeof(rdmach_ring_ctl_t)));
    rdmach_shm_detach(&peer_view);

    // a ring taken back is zeroed by giving its whole pages back, not by touching them all
    uint8_t *slots = rdmach_shm_ring_slots(&seg, 1);
    size_t bytes   = rdmach_geom_ring_bytes(rdmach_shm_ring_geom(&seg, 1));
    struct stat st_full, st_freed;
    memset(slots, 0xa5, bytes);
    ASSERT_EQ(0, fstat(seg.fd, &st_full));
    rdmach_shm_free_ring(&seg, 1);
    ASSERT_EQ(0, fstat(seg.fd, &st_freed));
    EXPECT_GE((st_full.st_blocks - st_freed.st_blocks) * 512, static_cast<off_t>(bytes * 3 / 4))
        << "the ring's pages were not given back";
    EXPECT_EQ(bytes, static_cast<size_t>(std::count(slots, slots + bytes, 0)));
    EXPECT_EQ(0, rdmach_shm_ring_ctl(&seg, 1)->owner);

    seg.hdr->large_rings = 9;
    EXPECT_EQ(-EPROTO, rdmach_shm_attach(&peer_view, getpid(), seg.fd, 0x4242));
    seg.hdr->large_rings  = 3;
    seg.hdr->large_nslots = 1000;
    EXPECT_EQ(-EPROTO, rdmach_shm_attach(&peer_view, getpid(), seg.fd, 0x4242));
    seg.hdr->large_nslots = 2048;   // a bigger ring than the segment holds
    EXPECT_EQ(-EPROTO, rdmach_shm_attach(&peer_view, getpid(), seg.fd, 0x4242));
    rdmach_shm_detach(&seg);
}

// ---- cooperative zero copy: the desk in the owner's segment (rdmach_shm_copy.c) ----
//
// The reader and the owner of the other memory take chunks off one counter; here the owner is
// a thread of this process polling its desk, as an idle rank's progress does.

extern "C" {
#include "ucx_ext_sys.h"   /* plain C, without C++ guards */
}

#include <atomic>
#include <chrono>
#include <csignal>
#include <sys/wait.h>
#include <functional>
#include <thread>

namespace {

int any_peer(void *, pid_t, uint64_t) { return 1; }
int no_peer(void *, pid_t, uint64_t) { return 0; }
int may_read_any(void *, uint64_t, uint64_t) { return 1; }
int may_read_none(void *, uint64_t, uint64_t) { return 0; }

const rdmach_shm_helper_t kAnyPeer = {any_peer, may_read_any, nullptr, nullptr};
const rdmach_shm_helper_t kNoPeer  = {no_peer, may_read_any, nullptr, nullptr};

struct Desk {
    Desk()
    {
        EXPECT_EQ(0, rdmach_shm_attach(&owner_by_reader, getpid(), owner.own.fd, 0x1234));
    }
    ~Desk() { rdmach_shm_detach(&owner_by_reader); }
    Seg owner, reader;
    rdmach_shm_seg_t owner_by_reader{};
};

std::vector<uint8_t> pattern(size_t len, uint8_t seed)
{
    std::vector<uint8_t> v(len);
    for (size_t i = 0; i < len; ++i) {
        v[i] = static_cast<uint8_t>(i * 131 + seed + (i >> 12));
    }
    return v;
}

}  // namespace

TEST(RdmachShmCopy, AReaderAloneCopiesEverythingBothWays)
{
    Desk d;
    const size_t len = 3 * 1024 * 1024 + 123;   // a partial last chunk
    std::vector<uint8_t> src = pattern(len, 7), dst(len);

    ASSERT_EQ(0, rdmach_shm_copy_run(&d.owner_by_reader, 0, &d.reader.own, dst.data(),
                                     reinterpret_cast<uintptr_t>(src.data()), len, 0, 0));
    EXPECT_EQ(src, dst);
    std::vector<uint8_t> back = pattern(len, 9);
    ASSERT_EQ(0, rdmach_shm_copy_run(&d.owner_by_reader, 0, &d.reader.own, back.data(),
                                     reinterpret_cast<uintptr_t>(dst.data()), len, 1, 0));
    EXPECT_EQ(back, dst) << "a put";
    EXPECT_EQ(0u, d.owner.own.hdr->copy_busy) << "the slot is free again";
    EXPECT_EQ(0u, d.owner.own.hdr->copy_active);
}

TEST(RdmachShmCopy, AnOwnerThatPollsTakesChunks)
{
    Desk d;
    const size_t len = 8 * 1024 * 1024;
    std::vector<uint8_t> src = pattern(len, 1), dst(len);
    std::atomic<bool> stop{false};
    std::atomic<unsigned> helped{0};
    std::thread owner([&] {
        while (!stop.load()) {
            helped += rdmach_shm_copy_help(&d.owner.own, &kAnyPeer, 0);
        }
    });

    // the owner's thread may be slow to start: a few tries until it has taken a chunk
    for (int i = 0; (i < 200) && (helped.load() == 0); ++i) {
        std::fill(dst.begin(), dst.end(), 0);
        ASSERT_EQ(0, rdmach_shm_copy_run(&d.owner_by_reader, 0, &d.reader.own, dst.data(),
                                         reinterpret_cast<uintptr_t>(src.data()), len, 0, 0));
        ASSERT_EQ(src, dst);
    }
    stop = true;
    owner.join();
    EXPECT_GT(helped.load(), 0u);
    EXPECT_EQ(0u, d.owner.own.hdr->copy_busy);
}

// Three reader threads take the desk's slots again and again, 60 copies each of 64 KiB-1 MiB
// (at most max_len), while the owner's thread helps; copy(peer, i, src, dst) does copy i
// (0 on success). How many copies failed or came out wrong.
namespace {

using CopyFn = std::function<int(rdmach_shm_seg_t *, int, std::vector<uint8_t> &,
                                 std::vector<uint8_t> &)>;

unsigned readers_reuse_slots(Desk &d, size_t max_len, const CopyFn &copy)
{
    std::atomic<bool> stop{false};
    std::atomic<unsigned> bad{0};
    std::thread owner([&] {
        while (!stop.load()) {
            rdmach_shm_copy_help(&d.owner.own, &kAnyPeer, 0);
        }
    });
    auto reader = [&](uint8_t seed) {
        rdmach_shm_seg_t peer{};
        if (rdmach_shm_attach(&peer, getpid(), d.owner.own.fd, 0x1234) != 0) {
            ++bad;
            return;
        }
        for (int i = 0; i < 60; ++i) {
            size_t len = std::min<size_t>((64 + 37 * ((i * 7 + seed) % 29)) * 1024 + i,
                                          max_len);
            std::vector<uint8_t> src = pattern(len, static_cast<uint8_t>(seed + i)), dst(len);
            if ((copy(&peer, i, src, dst) != 0) || (src != dst)) {
                ++bad;
            }
        }
        rdmach_shm_detach(&peer);
    };
    std::thread r1(reader, 1), r2(reader, 2), r3(reader, 3);
    r1.join();
    r2.join();
    r3.join();
    stop = true;
    owner.join();
    return bad.load();
}

}  // namespace

// Slots taken again and again by several readers while the owner helps: every copy must be
// exact (an owner that kept a finished job's fields must never claim a chunk of the next).
TEST(RdmachShmCopy, ReadersReuseSlotsWhileTheOwnerHelps)
{
    Desk d;
    EXPECT_EQ(0u, readers_reuse_slots(d, SIZE_MAX, [&](rdmach_shm_seg_t *peer, int i,
                                                       std::vector<uint8_t> &src,
                                                       std::vector<uint8_t> &dst) {
        return (i % 3 == 0) ?   // a put
            rdmach_shm_copy_run(peer, 0, &d.reader.own, src.data(),
                                reinterpret_cast<uintptr_t>(dst.data()), src.size(), 1, 0) :
            rdmach_shm_copy_run(peer, 0, &d.reader.own, dst.data(),
                                reinterpret_cast<uintptr_t>(src.data()), src.size(), 0, 0);
    }));
    EXPECT_EQ(0u, d.owner.own.hdr->copy_busy);
    EXPECT_EQ(0u, d.owner.own.hdr->copy_active);
}

// An owner that dies inside a chunk it claimed: the reader fails the copy (-ESRCH) instead of
// waiting for the chunk forever. The owner is a child process with its own segment and
// memory; it claims one chunk off its desk, as its progress would, and is killed there.
TEST(RdmachShmCopy, AnOwnerThatDiesInsideAChunkFailsTheCopy)
{
    const size_t len = 16 * 1024 * 1024;
    int to_parent[2], to_child[2];
    ASSERT_EQ(0, pipe(to_parent));
    ASSERT_EQ(0, pipe(to_child));

    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        Seg owner;
        std::vector<uint8_t> src = pattern(len, 5);
        uint64_t info[2] = {static_cast<uint64_t>(owner.own.fd),
                            reinterpret_cast<uintptr_t>(src.data())};
        char go;

        if ((write(to_parent[1], info, sizeof(info)) != sizeof(info)) ||
            (read(to_child[0], &go, 1) != 1)) {
            _exit(1);
        }
        // wait for the reader's job, take one chunk of it, and die with it
        for (;;) {
            uint32_t active = __atomic_load_n(&owner.own.hdr->copy_active, __ATOMIC_ACQUIRE);
            if (active == 0) {
                continue;
            }
            rdmach_shm_copy_t *job = &owner.own.hdr->copy[__builtin_ctz(active)];
            uint64_t c = __atomic_load_n(&job->claim, __ATOMIC_ACQUIRE);
            if (((uint32_t)c < job->nchunks) &&
                __atomic_compare_exchange_n(&job->claim, &c, c + 1, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE)) {
                kill(getpid(), SIGKILL);
            }
        }
    }

    uint64_t info[2];
    ASSERT_EQ(static_cast<ssize_t>(sizeof(info)), read(to_parent[0], info, sizeof(info)));
    unsigned long long start = ucx_ext_proc_start_time(child);
    Seg reader;
    rdmach_shm_seg_t peer{};
    ASSERT_EQ(0, rdmach_shm_attach(&peer, child, static_cast<int>(info[0]), 0x1234));
    std::vector<uint8_t> dst(len);
    ASSERT_EQ(1, write(to_child[1], "g", 1));

    // the reader may take every chunk before the child looks (a loaded machine): again,
    // until the child has claimed one; each copy that ends so must be whole
    int ret = 0;
    double s = 0;
    for (int i = 0; (i < 100) && (ret == 0); ++i) {
        auto t0 = std::chrono::steady_clock::now();
        ret = rdmach_shm_copy_run(&peer, start, &reader.own, dst.data(), info[1], len, 0, 0);
        s   = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (ret == 0) {
            EXPECT_EQ(pattern(len, 5), dst);
        }
    }
    EXPECT_EQ(-ESRCH, ret);
    EXPECT_LT(s, 10.0);
    int status = 0;
    EXPECT_EQ(child, waitpid(child, &status, 0));
    EXPECT_TRUE(WIFSIGNALED(status));
    rdmach_shm_detach(&peer);
    for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) {
        close(fd);
    }
}

TEST(RdmachShmCopy, TheOwnerIgnoresCorruptJobsAndStrangers)
{
    Desk d;
    rdmach_shm_copy_t *job = &d.owner.own.hdr->copy[3];
    char src[64] = "x", dst[64];

    // a job from a process the owner does not know: never copied for
    job->pid        = getpid();
    job->nchunks    = 1;
    job->chunk      = sizeof(src);
    job->len        = sizeof(src);
    job->owner_addr = reinterpret_cast<uintptr_t>(src);
    job->req_addr   = reinterpret_cast<uintptr_t>(dst);
    job->to_req     = 1;
    job->claim      = 5ull << 32;
    d.owner.own.hdr->copy_active = 1u << 3;
    EXPECT_EQ(0u, rdmach_shm_copy_help(&d.owner.own, &kNoPeer, 0));
    EXPECT_EQ(5ull << 32, job->claim) << "nothing claimed";

    // scribbled fields: too many chunks, a length beyond them, a closed job, a bad pid
    job->nchunks = RDMACH_SHM_COPY_CHUNKS + 1;
    EXPECT_EQ(0u, rdmach_shm_copy_help(&d.owner.own, &kAnyPeer, 0));
    job->nchunks = 2;
    job->chunk   = 1ull << 63;   // chunk * nchunks would wrap
    EXPECT_EQ(0u, rdmach_shm_copy_help(&d.owner.own, &kAnyPeer, 0));
    job->chunk   = sizeof(src);
    job->nchunks = 1;
    job->len     = 2 * sizeof(src);
    EXPECT_EQ(0u, rdmach_shm_copy_help(&d.owner.own, &kAnyPeer, 0));
    job->len     = sizeof(src);
    job->claim   = (5ull << 32) | RDMACH_SHM_COPY_CLOSED;
    EXPECT_EQ(0u, rdmach_shm_copy_help(&d.owner.own, &kAnyPeer, 0));
    job->claim   = 5ull << 32;
    job->pid     = -1;
    EXPECT_EQ(0u, rdmach_shm_copy_help(&d.owner.own, &kAnyPeer, 0));
    // an active bit beyond the desk
    d.owner.own.hdr->copy_active = 1u << 31;
    EXPECT_EQ(0u, rdmach_shm_copy_help(&d.owner.own, &kAnyPeer, 0));

    // and a sound one is copied, and counted done
    job->pid = getpid();
    d.owner.own.hdr->copy_active = 1u << 3;
    EXPECT_EQ(1u, rdmach_shm_copy_help(&d.owner.own, &kAnyPeer, 0));
    EXPECT_STREQ("x", dst);
    EXPECT_EQ(1ull, job->done);
    EXPECT_EQ(0u, rdmach_shm_copy_help(&d.owner.own, &kAnyPeer, 0)) << "all taken";

    // a reader that died with its job on the desk: reap gives its slot back, no other (not
    // another process's, nor another iface's of the same process)
    d.owner.own.hdr->copy_busy      = (1u << 3) | (1u << 4) | (1u << 5);
    job->seg_id                     = 77;
    d.owner.own.hdr->copy[4].pid    = getpid() + 1;
    d.owner.own.hdr->copy[4].seg_id = 77;
    d.owner.own.hdr->copy[5].pid    = getpid();
    d.owner.own.hdr->copy[5].seg_id = 78;
    rdmach_shm_copy_reap(&d.owner.own, getpid(), 77);
    EXPECT_EQ((1u << 4) | (1u << 5), d.owner.own.hdr->copy_busy);
    EXPECT_EQ(0u, d.owner.own.hdr->copy_active);
}

TEST(RdmachShmCopy, AFullDeskOrABadAddress)
{
    Desk d;
    std::vector<uint8_t> dst(1024 * 1024);

    d.owner.own.hdr->copy_busy = (1u << RDMACH_SHM_COPY_SLOTS) - 1;
    EXPECT_EQ(-EBUSY, rdmach_shm_copy_run(&d.owner_by_reader, 0, &d.reader.own, dst.data(),
                                          4096, dst.size(), 0, 0));
    // a corrupt busy mask with bits beyond the desk: still full, no slot outside it
    d.owner.own.hdr->copy_busy = 0xffffffffu;
    EXPECT_EQ(-EBUSY, rdmach_shm_copy_run(&d.owner_by_reader, 0, &d.reader.own, dst.data(),
                                          4096, dst.size(), 0, 0));
    d.owner.own.hdr->copy_busy = 0;
    EXPECT_EQ(-EFAULT, rdmach_shm_copy_run(&d.owner_by_reader, 0, &d.reader.own, dst.data(),
                                           4096, dst.size(), 0, 0));
    EXPECT_EQ(0u, d.owner.own.hdr->copy_busy) << "the slot is given back after a failure";
    EXPECT_EQ(0u, d.owner.own.hdr->copy_active);
}

// Through the wire table, as the glue drives it: a large rma goes over the desk, and the
// owner's progress copies for the reader it maps (a sender of one of its rings).
TEST(RdmachWireShm, ALargeRmaIsCopiedWithTheOwnersProgress)
{
    Wire a, b;
    rdmach_wire_peer_t *peer = nullptr;
    rdmach_tx_t tx{};
    rdmach_rx_t rx{};
    uint32_t id;
    const size_t len = 8 * 1024 * 1024;
    std::vector<uint8_t> src = pattern(len, 3);
    // more destinations than the wire remembers: a buffer copied into again at once would be
    // the reader's alone (ABufferCopiedIntoAgainGoesInFixedHalves)
    std::vector<std::vector<uint8_t>> dst(5, std::vector<uint8_t>(len));
    std::atomic<bool> stop{false};

    ASSERT_EQ(0, b.ops->attach(b.w, a.addr.data(), &peer));
    ASSERT_EQ(0, b.ops->claim(b.w, peer, &tx, &id));
    ASSERT_EQ(1, a.ops->activate(a.w, id, &rx));   // a maps b: b is a reader it knows
    std::thread owner([&] {
        while (!stop.load()) {
            a.ops->progress(a.w);
        }
    });
    for (int i = 0; (i < 200) && (a.wire_stats.copy_helped == 0); ++i) {
        std::vector<uint8_t> &to = dst[i % dst.size()];
        rdmach_wire_iov_t iov = {to.data(), len, nullptr};
        ASSERT_EQ(0, b.ops->rma(b.w, peer, &iov, 1, reinterpret_cast<uintptr_t>(src.data()), 0,
                                len, 0, nullptr, nullptr));
        ASSERT_EQ(src, to);
    }
    stop = true;
    owner.join();
    EXPECT_GT(a.wire_stats.copy_helped, 0u);
    EXPECT_GE(b.wire_stats.copy_jobs, 1u);
    EXPECT_EQ(0u, b.wire_stats.copy_helped);
}

namespace {

// b reads and writes a's memory; a knows b (it maps b's segment), so it helps b's jobs.
struct CopyPair {
    explicit CopyPair(size_t stage_max = 0)
        : a(4, 8, 0x5eed, 0, stage_max), b(4, 8, 0x5eed, 0, stage_max)
    {
        EXPECT_EQ(0, b.ops->attach(b.w, a.addr.data(), &peer));
        EXPECT_EQ(0, b.ops->claim(b.w, peer, &tx, &id));
        EXPECT_EQ(1, a.ops->activate(a.w, id, &rx));
    }
    Wire a, b;
    rdmach_wire_peer_t *peer = nullptr;
    rdmach_tx_t tx{};
    rdmach_rx_t rx{};
    uint32_t id = 0;
};

// Gets from..to-1 of src into dst[i], each with ops[i]: how many were posted, and how many
// were done at return (checked then).
void get_window(CopyPair &c, const std::vector<uint8_t> &src,
                std::vector<std::vector<uint8_t>> &dst, std::vector<Done> &ops, int from, int to,
                int *posted, int *sync)
{
    for (int i = from; i < to; ++i) {
        rdmach_wire_iov_t iov = {dst[i].data(), src.size(), nullptr};
        int ret = c.b.ops->rma(c.b.w, c.peer, &iov, 1, reinterpret_cast<uintptr_t>(src.data()),
                               0, src.size(), 0, nullptr, &ops[i]);
        if (ret == RDMACH_WIRE_INPROGRESS) {
            ++*posted;
        } else {
            ASSERT_EQ(0, ret);
            EXPECT_EQ(src, dst[i]) << "complete at return";
            ++*sync;
        }
    }
}

}  // namespace

// A get with a completion is posted and returns: the owner, polling, copies all of it before
// the reader looks again (what MPI's request-based RMA overlaps with computation); the
// reader's progress then completes it, and after it the flush that waited for it.
TEST(RdmachWireShm, APostedGetIsCopiedByTheOwnerAndCompletesFromProgress)
{
    CopyPair c;
    const size_t len = 1024 * 1024;   // RDMACH_SHM_COPY_SPLIT (8) chunks of 128 KiB
    std::vector<uint8_t> src = pattern(len, 5), dst(len);
    rdmach_wire_iov_t iov = {dst.data(), len, nullptr};
    std::vector<int> order;
    Done op, fl;

    op.order = fl.order = &order;
    op.id    = 1;
    fl.id    = 2;
    ASSERT_EQ(RDMACH_WIRE_INPROGRESS,
              c.b.ops->rma(c.b.w, c.peer, &iov, 1, reinterpret_cast<uintptr_t>(src.data()), 0,
                           len, 0, nullptr, &op));
    EXPECT_EQ(RDMACH_WIRE_INPROGRESS, c.b.ops->flush(c.b.w, c.peer, nullptr));
    EXPECT_EQ(RDMACH_WIRE_INPROGRESS, c.b.ops->flush(c.b.w, c.peer, &fl));
    EXPECT_EQ(1u, c.b.wire_stats.copy_jobs);

    EXPECT_EQ(RDMACH_SHM_COPY_SPLIT, c.a.ops->progress(c.a.w)) << "the owner takes every chunk";
    EXPECT_EQ(RDMACH_SHM_COPY_SPLIT, c.a.wire_stats.copy_helped);
    EXPECT_EQ(src, dst) << "in place before the reader's progress";
    EXPECT_EQ(0, op.calls);

    EXPECT_EQ(1u, c.b.ops->progress(c.b.w));
    EXPECT_EQ(1, op.calls);
    EXPECT_EQ(0, op.err);
    EXPECT_EQ(1, fl.calls);
    EXPECT_EQ(0, fl.err);
    EXPECT_EQ((std::vector<int>{1, 2}), order) << "the flush after what it waited for";
    EXPECT_EQ(0, c.b.ops->flush(c.b.w, c.peer, nullptr));
    EXPECT_EQ(0u, c.b.ops->progress(c.b.w));
    EXPECT_EQ(1, op.calls) << "completed once";
}

// A get posted while another is: it goes whole (one chunk), so that the two processes copy
// different gets at once, a system call each; the first, alone when posted, is cut.
TEST(RdmachWireShm, AGetPostedBehindAnotherGoesWhole)
{
    CopyPair c;
    const size_t len = 1024 * 1024;
    std::vector<uint8_t> src1 = pattern(len, 7), src2 = pattern(len, 9), dst1(len), dst2(len);
    rdmach_wire_iov_t iov1 = {dst1.data(), len, nullptr}, iov2 = {dst2.data(), len, nullptr};
    Done op1, op2;

    ASSERT_EQ(RDMACH_WIRE_INPROGRESS,
              c.b.ops->rma(c.b.w, c.peer, &iov1, 1, reinterpret_cast<uintptr_t>(src1.data()), 0,
                           len, 0, nullptr, &op1));
    ASSERT_EQ(RDMACH_WIRE_INPROGRESS,
              c.b.ops->rma(c.b.w, c.peer, &iov2, 1, reinterpret_cast<uintptr_t>(src2.data()), 0,
                           len, 0, nullptr, &op2));
    EXPECT_EQ(2u, c.b.wire_stats.copy_jobs);
    EXPECT_EQ(RDMACH_SHM_COPY_SPLIT + 1, c.a.ops->progress(c.a.w))
        << "the owner takes the first one's chunks and the second whole";
    EXPECT_EQ(src1, dst1);
    EXPECT_EQ(src2, dst2);
    EXPECT_EQ(2u, c.b.ops->progress(c.b.w));
    EXPECT_EQ(1, op1.calls);
    EXPECT_EQ(1, op2.calls);
    EXPECT_EQ(0, op1.err);
    EXPECT_EQ(0, op2.err);
}

// A process with posted copies of its own (a reads from c) does those and leaves the jobs a
// peer put on its desk (b's) to that peer, which copies them itself; with none left it helps
// again.
TEST(RdmachWireShm, AnOwnerWithCopiesOfItsOwnDoesThoseFirst)
{
    CopyPair c;                                   // b reads from a
    Wire third;                                   // and a from third
    rdmach_wire_peer_t *to_third = nullptr;
    rdmach_tx_t tx{};
    rdmach_rx_t rx{};
    uint32_t id;
    ASSERT_EQ(0, c.a.ops->attach(c.a.w, third.addr.data(), &to_third));
    ASSERT_EQ(0, c.a.ops->claim(c.a.w, to_third, &tx, &id));
    ASSERT_EQ(1, third.ops->activate(third.w, id, &rx));

    const size_t len = 1024 * 1024;
    std::vector<uint8_t> in_a = pattern(len, 11), in_third = pattern(len, 12), to_a(len),
                         to_b_buf(len);
    rdmach_wire_iov_t iov_b = {to_b_buf.data(), len, nullptr}, iov_a = {to_a.data(), len, nullptr};
    Done b_get, a_get, b_get2;

    ASSERT_EQ(RDMACH_WIRE_INPROGRESS,       // b's job on a's desk
              c.b.ops->rma(c.b.w, c.peer, &iov_b, 1, reinterpret_cast<uintptr_t>(in_a.data()), 0,
                           len, 0, nullptr, &b_get));
    ASSERT_EQ(RDMACH_WIRE_INPROGRESS,       // a's own job on third's desk
              c.a.ops->rma(c.a.w, to_third, &iov_a, 1,
                           reinterpret_cast<uintptr_t>(in_third.data()), 0, len, 0, nullptr,
                           &a_get));
    EXPECT_EQ(1u, c.a.ops->progress(c.a.w)) << "a copies its own get";
    EXPECT_EQ(1, a_get.calls);
    EXPECT_EQ(0, a_get.err);
    EXPECT_EQ(in_third, to_a);
    EXPECT_EQ(0u, c.a.wire_stats.copy_helped) << "b's job was left to b";
    EXPECT_EQ(0, b_get.calls);
    EXPECT_EQ(1u, c.b.ops->progress(c.b.w)) << "b copies its own";
    EXPECT_EQ(1, b_get.calls);
    EXPECT_EQ(0, b_get.err);
    EXPECT_EQ(in_a, to_b_buf);
    EXPECT_EQ(0u, c.b.wire_stats.copy_helped);

    // a has nothing of its own now: it helps b's next job again (into another buffer: one
    // copied into again goes in fixed halves, below)
    std::vector<uint8_t> to_b_buf2(len);
    rdmach_wire_iov_t iov_b2 = {to_b_buf2.data(), len, nullptr};
    ASSERT_EQ(RDMACH_WIRE_INPROGRESS,
              c.b.ops->rma(c.b.w, c.peer, &iov_b2, 1, reinterpret_cast<uintptr_t>(in_a.data()),
                           0, len, 0, nullptr, &b_get2));
    EXPECT_EQ(RDMACH_SHM_COPY_SPLIT, c.a.ops->progress(c.a.w));
    EXPECT_EQ(RDMACH_SHM_COPY_SPLIT, c.a.wire_stats.copy_helped);
    EXPECT_EQ(1u, c.b.ops->progress(c.b.w));
    EXPECT_EQ(1, b_get2.calls);
    EXPECT_EQ(in_a, to_b_buf2);
    EXPECT_EQ(0u, c.a.wire_stats.copy_owner_busy + c.b.wire_stats.copy_owner_busy);
}

// Both read from each other at once (bi-directional traffic): the one that reads while the
// other has a window of copies of its own posted (which help nobody, above) puts its job on
// the desk in one piece, one system call for whoever takes it (not halves into a buffer
// received into again), and one done at return is a single process_vm; once the other's
// copies are over, halves again. One copy posted is no window (a ping-pong's get).
TEST(RdmachWireShm, AReaderWhoseOwnerCopiesItsOwnCopiesInOnePiece)
{
    CopyPair c;                                   // b reads from a
    rdmach_wire_peer_t *to_b = nullptr;           // and a from b
    rdmach_tx_t tx{};
    rdmach_rx_t rx{};
    uint32_t id;
    ASSERT_EQ(0, c.a.ops->attach(c.a.w, c.b.addr.data(), &to_b));
    ASSERT_EQ(0, c.a.ops->claim(c.a.w, to_b, &tx, &id));
    ASSERT_EQ(1, c.b.ops->activate(c.b.w, id, &rx));

    const size_t len = 256 * 1024;
    std::vector<uint8_t> in_a = pattern(len, 13), in_b = pattern(len, 14), to_a1(len),
                         to_a2(len), to_b_buf(len), to_b_sync(len);
    rdmach_wire_iov_t iov_a1 = {to_a1.data(), len, nullptr},
                      iov_a2 = {to_a2.data(), len, nullptr},
                      iov_b  = {to_b_buf.data(), len, nullptr},
                      iov_bs = {to_b_sync.data(), len, nullptr};
    Done a_get1, a_get2, b_get1, b_get2, b_get3;
    auto b_get = [&](Done *d) {
        return c.b.ops->rma(c.b.w, c.peer, &iov_b, 1, reinterpret_cast<uintptr_t>(in_a.data()),
                            0, len, 0, nullptr, d);
    };
    auto b_wait = [&](Done *d) {
        while (d->calls == 0) {
            c.b.ops->progress(c.b.w);
        }
        EXPECT_EQ(0, d->err);
        EXPECT_EQ(in_a, to_b_buf);
        std::fill(to_b_buf.begin(), to_b_buf.end(), 0);
    };

    ASSERT_EQ(RDMACH_WIRE_INPROGRESS, b_get(&b_get1));   // b's buffer, new to it: chunks
    b_wait(&b_get1);
    ASSERT_EQ(RDMACH_WIRE_INPROGRESS,       // a's first job on b's desk: no window yet
              c.a.ops->rma(c.a.w, to_b, &iov_a1, 1, reinterpret_cast<uintptr_t>(in_b.data()),
                           0, len, 0, nullptr, &a_get1));
    ASSERT_EQ(RDMACH_WIRE_INPROGRESS, b_get(&b_get2));
    EXPECT_EQ(1u, c.b.wire_stats.copy_halves) << "one copy posted: b's buffer, in halves";
    EXPECT_EQ(0u, c.b.wire_stats.copy_owner_busy);
    b_wait(&b_get2);

    ASSERT_EQ(RDMACH_WIRE_INPROGRESS,       // a's second: a window, a copies its own now
              c.a.ops->rma(c.a.w, to_b, &iov_a2, 1, reinterpret_cast<uintptr_t>(in_b.data()),
                           0, len, 0, nullptr, &a_get2));
    ASSERT_EQ(RDMACH_WIRE_INPROGRESS, b_get(&b_get3));
    EXPECT_EQ(1u, c.b.wire_stats.copy_owner_busy);
    EXPECT_EQ(1u, c.b.wire_stats.copy_halves) << "in one piece";
    EXPECT_TRUE(std::all_of(to_b_buf.begin(), to_b_buf.end(), [](uint8_t x) { return x == 0; }))
        << "nothing copied inside the call";
    ASSERT_EQ(0, c.b.ops->rma(c.b.w, c.peer, &iov_bs, 1,
                              reinterpret_cast<uintptr_t>(in_a.data()), 0, len, 0, nullptr,
                              nullptr))
        << "done at return: one process_vm";
    EXPECT_EQ(in_a, to_b_sync);
    EXPECT_EQ(2u, c.b.wire_stats.copy_owner_busy);
    EXPECT_EQ(3u, c.b.wire_stats.copy_jobs);

    EXPECT_EQ(1u, c.b.ops->progress(c.b.w)) << "b's own job first, one piece";
    EXPECT_EQ(1, b_get3.calls);
    EXPECT_EQ(0, b_get3.err);
    EXPECT_EQ(in_a, to_b_buf);
    EXPECT_EQ(RDMACH_SHM_COPY_SPLIT + 1, c.b.ops->progress(c.b.w))
        << "then, with nothing of its own posted, both of a's jobs (the second whole)";
    EXPECT_EQ(2u, c.a.ops->progress(c.a.w));
    EXPECT_EQ(0, a_get1.err);
    EXPECT_EQ(0, a_get2.err);
    EXPECT_EQ(in_b, to_a1);
    EXPECT_EQ(in_b, to_a2);
}

// Two processes reading from each other: a get that would go staged takes the page walk
// while its owner walks pages of its own (a window of its own posted, its own gets not
// staged), since the staged pieces would wait for the owner's core that its walks hold; with
// the owner's window over, or its own gets staged, it goes staged again.
TEST(RdmachWireShm, AGetDoesNotStageAgainstItsOwnersPageWalk)
{
    Wire a(4, 8, 0x5eed, 0, 0);                     // a walks: it stages nothing
    Wire b(4, 8, 0x5eed, 0, RDMACH_WIRE_STAGE_MAX);  // b stages every get
    Wire s(4, 8, 0x5eed, 0, RDMACH_WIRE_STAGE_MAX);  // s stages its own too
    rdmach_wire_peer_t *b_to_a = nullptr, *a_to_b = nullptr, *b_to_s = nullptr,
                       *s_to_b = nullptr;
    ASSERT_EQ(0, b.ops->attach(b.w, a.addr.data(), &b_to_a));
    ASSERT_EQ(0, a.ops->attach(a.w, b.addr.data(), &a_to_b));
    ASSERT_EQ(0, b.ops->attach(b.w, s.addr.data(), &b_to_s));
    ASSERT_EQ(0, s.ops->attach(s.w, b.addr.data(), &s_to_b));
    rdmach_tx_t tx[4]{};
    rdmach_rx_t rx[4]{};
    uint32_t id;
    int k = 0;
    for (auto [from, to_peer, owner] :
         {std::make_tuple(&b, b_to_a, &a), std::make_tuple(&a, a_to_b, &b),
          std::make_tuple(&b, b_to_s, &s), std::make_tuple(&s, s_to_b, &b)}) {
        ASSERT_EQ(0, from->ops->claim(from->w, to_peer, &tx[k], &id));   // maps the owner
        ASSERT_EQ(1, owner->ops->activate(owner->w, id, &rx[k]));
        ++k;
    }

    const size_t len = 256 * 1024;
    std::vector<uint8_t> in_a = pattern(len, 31), in_b = pattern(len, 32),
                         in_s = pattern(len, 33);
    std::vector<std::vector<uint8_t>> to(8, std::vector<uint8_t>(len));
    std::vector<Done> d(8);
    auto get = [&](Wire &w, rdmach_wire_peer_t *p, const std::vector<uint8_t> &src, int i) {
        rdmach_wire_iov_t iov = {to[i].data(), len, nullptr};
        return w.ops->rma(w.w, p, &iov, 1, reinterpret_cast<uintptr_t>(src.data()), 0, len, 0,
                          nullptr, &d[i]);
    };
    auto drain = [&](std::initializer_list<Wire*> ws, std::initializer_list<int> ids) {
        while (std::any_of(ids.begin(), ids.end(), [&](int i) { return d[i].calls == 0; })) {
            for (Wire *w : ws) {
                w->ops->progress(w->w);
            }
        }
    };

    ASSERT_EQ(RDMACH_WIRE_INPROGRESS, get(b, b_to_a, in_a, 0));   // a idle: staged
    EXPECT_EQ(1u, b.wire_stats.copy_staged);
    drain({&a, &b}, {0});

    ASSERT_EQ(RDMACH_WIRE_INPROGRESS, get(a, a_to_b, in_b, 1));   // a's own window, walked
    ASSERT_EQ(RDMACH_WIRE_INPROGRESS, get(a, a_to_b, in_b, 2));
    ASSERT_EQ(RDMACH_WIRE_INPROGRESS, get(b, b_to_a, in_a, 3));
    EXPECT_EQ(1u, b.wire_stats.stage_peer_walks);
    EXPECT_EQ(1u, b.wire_stats.copy_staged) << "the page walk, against a's own";
    EXPECT_EQ(1u, b.wire_stats.copy_owner_busy) << "in one piece";
    drain({&a, &b}, {1, 2, 3});

    ASSERT_EQ(RDMACH_WIRE_INPROGRESS, get(b, b_to_a, in_a, 4));   // a's window over: staged
    EXPECT_EQ(2u, b.wire_stats.copy_staged);
    drain({&a, &b}, {4});

    ASSERT_EQ(RDMACH_WIRE_INPROGRESS, get(s, s_to_b, in_b, 6));   // s's own window, staged
    ASSERT_EQ(RDMACH_WIRE_INPROGRESS, get(s, s_to_b, in_b, 7));
    ASSERT_EQ(RDMACH_WIRE_INPROGRESS, get(b, b_to_s, in_s, 5));
    EXPECT_EQ(3u, b.wire_stats.copy_staged) << "s stages its own: b stages too";
    EXPECT_EQ(1u, b.wire_stats.stage_peer_walks);
    drain({&s, &b}, {5, 6, 7});

    for (int i : {0, 3, 4}) {
        EXPECT_EQ(in_a, to[i]) << i;
    }
    for (int i : {1, 2, 6, 7}) {
        EXPECT_EQ(in_b, to[i]) << i;
    }
    EXPECT_EQ(in_s, to[5]);
    for (const Done &x : d) {
        EXPECT_EQ(0, x.err);
    }
}

// A buffer copied into again (MPI receiving into one buffer) goes in two fixed halves: the
// reader's first half is copied before rma returns, so the owner can only take the second,
// and each half stays in one core's cache from one copy to the next.
TEST(RdmachWireShm, ABufferCopiedIntoAgainGoesInFixedHalves)
{
    CopyPair c;
    const size_t len = 256 * 1024;
    std::vector<uint8_t> src = pattern(len, 21), dst(len);
    rdmach_wire_iov_t iov = {dst.data(), len, nullptr};
    Done first, again;

    ASSERT_EQ(RDMACH_WIRE_INPROGRESS,      // new to the reader: chunks for whoever comes first
              c.b.ops->rma(c.b.w, c.peer, &iov, 1, reinterpret_cast<uintptr_t>(src.data()), 0,
                           len, 0, nullptr, &first));
    EXPECT_EQ(0u, c.b.wire_stats.copy_helped);
    while (first.calls == 0) {
        c.b.ops->progress(c.b.w);
    }
    ASSERT_EQ(0, first.err);
    ASSERT_EQ(src, dst);

    std::fill(dst.begin(), dst.end(), 0);
    ASSERT_EQ(RDMACH_WIRE_INPROGRESS,
              c.b.ops->rma(c.b.w, c.peer, &iov, 1, reinterpret_cast<uintptr_t>(src.data()), 0,
                           len, 0, nullptr, &again));
    EXPECT_TRUE(std::equal(src.begin(), src.begin() + len / 2, dst.begin()))
        << "the reader's half is copied at once";
    EXPECT_TRUE(std::all_of(dst.begin() + len / 2, dst.end(), [](uint8_t x) { return x == 0; }))
        << "the owner's half waits for the owner";
    EXPECT_EQ(1u, c.a.ops->progress(c.a.w)) << "the owner takes the second half, only";
    EXPECT_EQ(1u, c.a.wire_stats.copy_helped);
    EXPECT_EQ(1u, c.b.ops->progress(c.b.w));
    EXPECT_EQ(1, again.calls);
    EXPECT_EQ(0, again.err);
    EXPECT_EQ(src, dst);
}

// An owner that never looks: the reader's progress copies everything, both ways.
TEST(RdmachWireShm, APostedRmaIsCopiedByTheReaderAloneWhenTheOwnerDoesNotLook)
{
    CopyPair c;
    const size_t len = 3 * 1024 * 1024 + 100;
    std::vector<uint8_t> src = pattern(len, 6), dst(len), back = pattern(len, 7);
    rdmach_wire_iov_t iov = {dst.data(), len, nullptr};
    Done get, put;

    ASSERT_EQ(RDMACH_WIRE_INPROGRESS,
              c.b.ops->rma(c.b.w, c.peer, &iov, 1, reinterpret_cast<uintptr_t>(src.data()), 0,
                           len, 0, nullptr, &get));
    iov = {back.data(), len, nullptr};
    ASSERT_EQ(RDMACH_WIRE_INPROGRESS,
              c.b.ops->rma(c.b.w, c.peer, &iov, 1, reinterpret_cast<uintptr_t>(src.data()), 0,
                           len, 1, nullptr, &put));
    // the put reads back, so src was read by the get first or not at all: both end equal
    EXPECT_EQ(2u, c.b.ops->progress(c.b.w));
    EXPECT_EQ(1, get.calls);
    EXPECT_EQ(1, put.calls);
    EXPECT_EQ(0, get.err);
    EXPECT_EQ(0, put.err);
    EXPECT_EQ(pattern(len, 6), dst);
    EXPECT_EQ(back, src);
    EXPECT_EQ(0u, c.a.wire_stats.copy_helped);
}

// Memory mapped here (the peer's md allocated it) is copied with memcpy by the reader; the
// copy is listed by flush until its completion.
TEST(RdmachWireShm, APostedPutToMappedMemory)
{
    CopyPair c;
    const size_t len = 256 * 1024;
    std::vector<uint8_t> target(len), src = pattern(len, 8);
    rdmach_wire_iov_t iov = {src.data(), len, nullptr};
    Done op;

    // "mapped": the target's bytes as this process reaches them (here: the same address)
    ASSERT_EQ(RDMACH_WIRE_INPROGRESS,
              c.b.ops->rma(c.b.w, c.peer, &iov, 1, reinterpret_cast<uintptr_t>(target.data()),
                           0, len, 1, target.data(), &op));
    EXPECT_EQ(RDMACH_WIRE_INPROGRESS, c.b.ops->flush(c.b.w, c.peer, nullptr));
    EXPECT_EQ(RDMACH_WIRE_INPROGRESS, c.b.ops->flush(c.b.w, nullptr, nullptr));
    EXPECT_EQ(1u, c.b.ops->progress(c.b.w));
    EXPECT_EQ(src, target);
    EXPECT_EQ(1, op.calls);
    EXPECT_EQ(0, op.err);
    EXPECT_EQ(0, c.b.ops->flush(c.b.w, c.peer, nullptr));
}

// More copies than the wire posts: the rest are synchronous, complete at return. More flushes
// than it keeps: -EAGAIN. A wire that closes with copies posted finishes them, silently.
TEST(RdmachWireShm, PostedCopiesAndFlushesAreBounded)
{
    CopyPair c;
    const size_t len = 64 * 1024;
    std::vector<uint8_t> src = pattern(len, 9);
    std::vector<std::vector<uint8_t>> dst(20, std::vector<uint8_t>(len));
    std::vector<Done> ops(20), flushes(17);
    int posted = 0, sync = 0, i;

    get_window(c, src, dst, ops, 0, 20, &posted, &sync);
    EXPECT_EQ(16, posted);
    EXPECT_EQ(4, sync);
    for (i = 0; i < 16; ++i) {
        ASSERT_EQ(RDMACH_WIRE_INPROGRESS, c.b.ops->flush(c.b.w, nullptr, &flushes[i]));
    }
    EXPECT_EQ(-EAGAIN, c.b.ops->flush(c.b.w, nullptr, &flushes[16]));
    EXPECT_EQ(16u, c.b.ops->progress(c.b.w));
    for (i = 0; i < 20; ++i) {
        EXPECT_EQ(src, dst[i]);
        EXPECT_EQ((i < 16) ? 1 : 0, ops[i].calls);
    }
    for (i = 0; i < 16; ++i) {
        EXPECT_EQ(1, flushes[i].calls);
    }

    {
        Wire reader;
        rdmach_wire_peer_t *peer = nullptr;
        std::vector<uint8_t> last(len);
        rdmach_wire_iov_t iov = {last.data(), len, nullptr};
        Done op;

        ASSERT_EQ(0, reader.ops->attach(reader.w, c.a.addr.data(), &peer));
        ASSERT_EQ(RDMACH_WIRE_INPROGRESS,
                  reader.ops->rma(reader.w, peer, &iov, 1,
                                  reinterpret_cast<uintptr_t>(src.data()), 0, len, 0, nullptr,
                                  &op));
        reader.ops->close(reader.w);
        reader.w = nullptr;
        EXPECT_EQ(src, last) << "finished at close";
        EXPECT_EQ(0, op.calls) << "without a completion: the iface is going";
    }
}

// ---- staged gets (rdmach_shm.h): the owner copies its own bytes into its segment's staging
// buffers, the reader copies them out; no page walk ----


// One thread, the owner's and the reader's turns interleaved: the owner stages as many pieces
// as there are staging buffers, the reader copies them out, and so on; the last piece partial.
TEST(RdmachShmStage, PiecesGoThroughTheStagingBuffersInTurn)
{
    Desk d;
    const size_t len = 17 * RDMACH_SHM_STAGE_PIECE + 5;   // 18 pieces
    std::vector<uint8_t> src = pattern(len, 4), dst(len);
    rdmach_shm_copy_req_t req;

    ASSERT_EQ(0, rdmach_shm_copy_post_staged(&req, &d.owner_by_reader, 0, &d.reader.own,
                                             dst.data(), reinterpret_cast<uintptr_t>(src.data()),
                                             len, 0));
    EXPECT_EQ(RDMACH_SHM_STAGE_DEPTH, rdmach_shm_copy_help(&d.owner.own, &kAnyPeer, 1))
        << "one piece per staging buffer";
    EXPECT_EQ(0u, rdmach_shm_copy_help(&d.owner.own, &kAnyPeer, 1)) << "until they are copied out";
    EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [](uint8_t x) { return x == 0; }));
    EXPECT_EQ(RDMACH_SHM_COPY_PENDING, rdmach_shm_copy_advance(&req, 0));
    EXPECT_TRUE(std::equal(src.begin(), src.begin() + 8 * RDMACH_SHM_STAGE_PIECE, dst.begin()));
    EXPECT_EQ(RDMACH_SHM_STAGE_DEPTH, rdmach_shm_copy_help(&d.owner.own, &kAnyPeer, 1));
    EXPECT_EQ(RDMACH_SHM_COPY_PENDING, rdmach_shm_copy_advance(&req, 0));
    EXPECT_EQ(2u, rdmach_shm_copy_help(&d.owner.own, &kAnyPeer, 0));
    EXPECT_EQ(0, rdmach_shm_copy_advance(&req, 0));
    EXPECT_EQ(src, dst);
    EXPECT_EQ(0, req.unstaged) << "every piece was the owner's";
    EXPECT_EQ(18u, d.owner.own.hdr->staged_seq);
    EXPECT_EQ(0u, d.owner.own.hdr->copy_busy) << "the slot is free again";
    EXPECT_EQ(0u, d.owner.own.hdr->copy_active);
}

// A timed job counts the ticks both processes spent in its copies (the staged-or-not pick's
// cost where both cores have copies of their own, rdmach_wire_shm_rma.c): the owner's on its
// desk, the reader's in its request, summed when the job is over, with the owner's word
// bounded. An untimed one counts nothing.
TEST(RdmachShmCopy, ATimedJobCountsTheWorkOfBothProcesses)
{
    Desk d;
    const size_t len = 9 * RDMACH_SHM_STAGE_PIECE;
    std::vector<uint8_t> src = pattern(len, 12), dst(len);
    rdmach_shm_copy_req_t req;
    uint64_t owner;
    int ret;

    for (int staged = 0; staged < 2; ++staged) {
        for (int timed = 0; timed < 2; ++timed) {
            std::fill(dst.begin(), dst.end(), 0);
            ASSERT_EQ(0, staged ?
                      rdmach_shm_copy_post_staged(&req, &d.owner_by_reader, 0, &d.reader.own,
                                                  dst.data(),
                                                  reinterpret_cast<uintptr_t>(src.data()), len,
                                                  timed) :
                      rdmach_shm_copy_post(&req, &d.owner_by_reader, 0, &d.reader.own,
                                           dst.data(), reinterpret_cast<uintptr_t>(src.data()),
                                           nullptr, len, 0, RDMACH_SHM_COPY_SPLIT, timed));
            EXPECT_GT(rdmach_shm_copy_help(&d.owner.own, &kAnyPeer, 0), 0u);
            owner = req.job->owner_work;
            while ((ret = rdmach_shm_copy_advance(&req, 0)) == RDMACH_SHM_COPY_PENDING) {
                (void)rdmach_shm_copy_help(&d.owner.own, &kAnyPeer, 0);
            }
            EXPECT_EQ(0, ret);
            EXPECT_EQ(src, dst);
            if (timed) {
                EXPECT_GT(owner, 0u) << "staged " << staged;
                // staged: the reader copies every piece out; else the owner took them all
                EXPECT_GE(req.work, owner + (staged ? 1 : 0)) << "staged " << staged;
            } else {
                EXPECT_EQ(0u, owner) << "staged " << staged;
                EXPECT_EQ(0u, req.work) << "staged " << staged;
            }
        }
    }

    // the owner's word is the peer's: beyond 1000 ticks a byte it counts nothing
    std::fill(dst.begin(), dst.end(), 0);
    ASSERT_EQ(0, rdmach_shm_copy_post_staged(&req, &d.owner_by_reader, 0, &d.reader.own,
                                             dst.data(), reinterpret_cast<uintptr_t>(src.data()),
                                             len, 1));
    while ((ret = rdmach_shm_copy_advance(&req, 0)) == RDMACH_SHM_COPY_PENDING) {
        (void)rdmach_shm_copy_help(&d.owner.own, &kAnyPeer, 1);
        req.job->owner_work = ~0ull;
    }
    EXPECT_EQ(0, ret);
    EXPECT_EQ(src, dst);
    EXPECT_LT(req.work, 1000ull * len);
}

// ucx_ext_memcpy (uct/common/ucx_ext_sys.h) copies exactly len bytes at every distance between
// the buffers modulo a page: inside the window it goes in pieces, the last one partial.
TEST(UcxExtCopy, EveryDistanceAndLengthCopiesExactlyTheBytes)
{
    const size_t deltas[]  = {0, 1, 16, 31, 32, 63, 64, 4080, 4095};
    const size_t lengths[] = {0, 1, 2048, 4095, 4096, 4097, 16384 + 5, 70000};
    const size_t guard     = 64;
    std::vector<uint8_t> src = pattern(70000 + 8192, 3);

    for (size_t delta : deltas) {
        for (size_t len : lengths) {
            std::vector<uint8_t> area(len + 8192 + 2 * guard, 0xee);
            const uintptr_t s = reinterpret_cast<uintptr_t>(src.data());
            uintptr_t d       = reinterpret_cast<uintptr_t>(area.data()) + guard;

            d += (s + delta - d) & 4095;   // d - s is delta modulo 4096
            ASSERT_EQ(delta, (d - s) & 4095);
            ucx_ext_memcpy(reinterpret_cast<void*>(d), src.data(), len);
            const size_t at = d - reinterpret_cast<uintptr_t>(area.data());
            EXPECT_TRUE(std::equal(src.begin(), src.begin() + len, area.begin() + at))
                << "delta " << delta << " len " << len;
            EXPECT_TRUE(std::all_of(area.begin(), area.begin() + at,
                                    [](uint8_t x) { return x == 0xee; }));
            EXPECT_TRUE(std::all_of(area.begin() + at + len, area.end(),
                                    [](uint8_t x) { return x == 0xee; }))
                << "delta " << delta << " len " << len << ": a byte past the copy";
        }
    }
}

// A staged get into a buffer 16 bytes into a page (malloc's large blocks), whose copy out of
// the page-aligned staging buffers lies in ucx_ext_memcpy's window: every byte arrives.
TEST(RdmachShmStage, AReceiveBufferOffTheStagingBuffersAlignmentGetsEveryByte)
{
    Desk d;
    const size_t len = 5 * RDMACH_SHM_STAGE_PIECE + 9;
    std::vector<uint8_t> src = pattern(len + 4096, 6);

    // destinations 0-63 bytes into a page, sources two ways off it: every byte, nothing
    // around the destination touched
    for (size_t dst_off : {0, 1, 16, 31, 32, 63}) {
        for (size_t src_off : {0, 7}) {
            std::vector<uint8_t> area(len + 8192, 0xee);
            rdmach_shm_copy_req_t req;
            uintptr_t dst = ((reinterpret_cast<uintptr_t>(area.data()) + 4095) &
                             ~uintptr_t(4095)) + dst_off;
            int ret;

            ASSERT_EQ(0, rdmach_shm_copy_post_staged(&req, &d.owner_by_reader, 0,
                                                     &d.reader.own,
                                                     reinterpret_cast<void*>(dst),
                                                     reinterpret_cast<uintptr_t>(src.data()) +
                                                     src_off, len, 0));
            do {
                (void)rdmach_shm_copy_help(&d.owner.own, &kAnyPeer, 1);
            } while ((ret = rdmach_shm_copy_advance(&req, 0)) == RDMACH_SHM_COPY_PENDING);
            EXPECT_EQ(0, ret);
            EXPECT_EQ(0, req.unstaged);
            EXPECT_TRUE(std::equal(src.begin() + src_off, src.begin() + src_off + len,
                                   reinterpret_cast<const uint8_t*>(dst)))
                << "destination +" << dst_off << ", source +" << src_off;
            const uint8_t *before = reinterpret_cast<const uint8_t*>(dst) - 1;
            EXPECT_EQ(0xee, *before);
            EXPECT_EQ(0xee, before[len + 1]);
        }
    }
}

// A piece sits at its destination's offset within a cache line, inside its own buffer, and the
// last buffer ends before the free map, whatever the reader wrote as its destination.
TEST(RdmachShmStage, APieceSitsAtItsDestinationsLineOffsetInsideItsBuffer)
{
    Desk d;
    rdmach_shm_hdr_t *hdr = d.owner.own.hdr;
    const uint8_t *base   = rdmach_shm_stage_at(hdr, 0, 0, 0);

    for (unsigned slot = 0; slot < RDMACH_SHM_COPY_SLOTS; ++slot) {
        for (unsigned b = 0; b < RDMACH_SHM_STAGE_DEPTH; ++b) {
            const uint8_t *buf = base + (size_t)(slot * RDMACH_SHM_STAGE_DEPTH + b) *
                                        RDMACH_SHM_STAGE_STRIDE;
            for (uint64_t addr : {0ull, 1ull, 16ull, 63ull, 64ull, 0x7f0000001011ull,
                                  ~0ull}) {
                const uint8_t *at = rdmach_shm_stage_at(hdr, slot, b, addr);
                ASSERT_EQ(0u, (reinterpret_cast<uintptr_t>(at) - addr) % 64) << addr;
                ASSERT_GE(at, buf);
                ASSERT_LE(at + RDMACH_SHM_STAGE_PIECE, buf + RDMACH_SHM_STAGE_STRIDE);
            }
        }
    }
    EXPECT_EQ(0u, reinterpret_cast<uintptr_t>(base) % 4096);
    EXPECT_LE(base + RDMACH_SHM_STAGE_BYTES,
              reinterpret_cast<const uint8_t*>(hdr) + hdr->freemap_off);
}

// More pieces than a chunk mask has bits (a staged job goes in order): 100 pieces, the owner's
// and the reader's turns interleaved; then a job the owner leaves halfway (it refuses the
// rest, as a busy owner stops): the reader reads from where the owner's claims end.
TEST(RdmachShmStage, ManyPiecesInOrderAndTheRestFromWhereTheOwnerStopped)
{
    Desk d;
    const size_t len = 99 * RDMACH_SHM_STAGE_PIECE + 77;   // 100 pieces
    std::vector<uint8_t> src = pattern(len, 8), dst(len);
    rdmach_shm_copy_req_t req;
    unsigned staged = 0;
    int ret;

    ASSERT_EQ(0, rdmach_shm_copy_post_staged(&req, &d.owner_by_reader, 0, &d.reader.own,
                                             dst.data(), reinterpret_cast<uintptr_t>(src.data()),
                                             len, 0));
    do {
        staged += rdmach_shm_copy_help(&d.owner.own, &kAnyPeer, 1);
    } while ((ret = rdmach_shm_copy_advance(&req, 0)) == RDMACH_SHM_COPY_PENDING);
    EXPECT_EQ(0, ret);
    EXPECT_EQ(100u, staged);
    EXPECT_EQ(0, req.unstaged);
    EXPECT_EQ(src, dst);

    std::fill(dst.begin(), dst.end(), 0);
    ASSERT_EQ(0, rdmach_shm_copy_post_staged(&req, &d.owner_by_reader, 0, &d.reader.own,
                                             dst.data(), reinterpret_cast<uintptr_t>(src.data()),
                                             len, 0));
    EXPECT_EQ(RDMACH_SHM_STAGE_DEPTH, rdmach_shm_copy_help(&d.owner.own, &kAnyPeer, 1));
    EXPECT_EQ(RDMACH_SHM_COPY_PENDING, rdmach_shm_copy_advance(&req, 0));
    EXPECT_EQ(RDMACH_SHM_STAGE_DEPTH, rdmach_shm_copy_help(&d.owner.own, &kAnyPeer, 1));
    req.job->refused = 1;   // the owner stops here: 16 pieces staged, the second 8 not out
    while ((ret = rdmach_shm_copy_advance(&req, 0)) == RDMACH_SHM_COPY_PENDING) {
    }
    EXPECT_EQ(0, ret);
    EXPECT_EQ(1, req.unstaged);
    EXPECT_EQ(2 * RDMACH_SHM_STAGE_DEPTH, req.owner_end) << "the rest read from piece 16";
    EXPECT_EQ(req.drained, req.owner_end) << "every piece the owner claimed was copied out";
    EXPECT_EQ(src, dst);
    EXPECT_EQ(0u, d.owner.own.hdr->copy_busy);
}

// An owner that never looks (it computes): after RDMACH_SHM_STAGE_PATIENCE advances the reader
// takes every piece itself, in one call. An owner that may not read the range (not a
// registration of its own) refuses at once, and the reader does the same without waiting.
TEST(RdmachShmStage, TheReaderTakesWhatTheOwnerLeavesOrRefuses)
{
    Desk d;
    const size_t len = 300 * 1024 + 7;
    std::vector<uint8_t> src = pattern(len, 5), dst(len);
    rdmach_shm_copy_req_t req;
    int calls = 0, ret;

    ASSERT_EQ(0, rdmach_shm_copy_post_staged(&req, &d.owner_by_reader, 0, &d.reader.own,
                                             dst.data(), reinterpret_cast<uintptr_t>(src.data()),
                                             len, 0));
    while ((ret = rdmach_shm_copy_advance(&req, 0)) == RDMACH_SHM_COPY_PENDING) {
        ++calls;
    }
    EXPECT_EQ(0, ret);
    EXPECT_EQ(RDMACH_SHM_STAGE_PATIENCE - 1, calls);
    EXPECT_EQ(src, dst);
    EXPECT_EQ(1, req.unstaged);

    const rdmach_shm_helper_t refuse = {any_peer, may_read_none, nullptr, nullptr};
    std::fill(dst.begin(), dst.end(), 0);
    ASSERT_EQ(0, rdmach_shm_copy_post_staged(&req, &d.owner_by_reader, 0, &d.reader.own,
                                             dst.data(), reinterpret_cast<uintptr_t>(src.data()),
                                             len, 0));
    EXPECT_EQ(0u, rdmach_shm_copy_help(&d.owner.own, &refuse, 0));
    EXPECT_EQ(0, rdmach_shm_copy_advance(&req, 0)) << "refused: taken at the first advance";
    EXPECT_EQ(src, dst);
    EXPECT_EQ(1, req.unstaged);
    const rdmach_shm_helper_t no_check = {any_peer, nullptr, nullptr, nullptr};
    ASSERT_EQ(0, rdmach_shm_copy_post_staged(&req, &d.owner_by_reader, 0, &d.reader.own,
                                             dst.data(), reinterpret_cast<uintptr_t>(src.data()),
                                             len, 0));
    EXPECT_EQ(0u, rdmach_shm_copy_help(&d.owner.own, &no_check, 0)) << "no may_read: none";
    EXPECT_EQ(0, rdmach_shm_copy_advance(&req, 0));
    EXPECT_EQ(0u, d.owner.own.hdr->copy_busy);

    EXPECT_EQ(-EINVAL, rdmach_shm_copy_post_staged(&req, &d.owner_by_reader, 0, &d.reader.own,
                                                   dst.data(), 4096, RDMACH_SHM_STAGE_MAX + 1, 0));
    EXPECT_EQ(-EINVAL, rdmach_shm_copy_post_staged(&req, &d.owner_by_reader, 0, &d.reader.own,
                                                   dst.data(), 4096, 0, 0));
}

// The staging words and the job are writable by every process that maps the owner's segment:
// a piece index beyond the job, or in a buffer it does not go through, is never copied out
// (AddressSanitizer would see a read past the staging or a write past the destination); the
// reader then takes the pieces itself. And an owner ignores a staged job whose piece size or
// direction is not a staged get's.
TEST(RdmachShmStage, ScribbledStagingWordsAndJobsAreIgnored)
{
    Desk d;
    const size_t len = 2 * RDMACH_SHM_STAGE_PIECE;
    std::vector<uint8_t> src = pattern(len, 6), dst(len);
    rdmach_shm_copy_req_t req;
    int ret;

    ASSERT_EQ(0, rdmach_shm_copy_post_staged(&req, &d.owner_by_reader, 0, &d.reader.own,
                                             dst.data(), reinterpret_cast<uintptr_t>(src.data()),
                                             len, 0));
    rdmach_shm_copy_t *job = req.job;
    job->staged[0] = 2;            // piece 1 in buffer 0
    job->staged[1] = 1000;         // no such piece
    job->staged[2] = 0xffffffffu;  // index wraps
    job->staged[3] = 4;            // piece 3 of a job of 2
    while ((ret = rdmach_shm_copy_advance(&req, 0)) == RDMACH_SHM_COPY_PENDING) {
    }
    EXPECT_EQ(0, ret);
    EXPECT_EQ(src, dst);
    EXPECT_EQ(1, req.unstaged);
    EXPECT_EQ(2u, job->staged[0]) << "left as it was, not taken for ours";

    // the next job in that slot starts with clean staging words
    ASSERT_EQ(0, rdmach_shm_copy_post_staged(&req, &d.owner_by_reader, 0, &d.reader.own,
                                             dst.data(), reinterpret_cast<uintptr_t>(src.data()),
                                             len, 0));
    EXPECT_EQ(0u, job->staged[0]);
    job->chunk = RDMACH_SHM_STAGE_PIECE / 2;   // a staged job must have pieces of PIECE
    job->nchunks = 4;
    EXPECT_EQ(0u, rdmach_shm_copy_help(&d.owner.own, &kAnyPeer, 0));
    job->chunk   = RDMACH_SHM_STAGE_PIECE;
    job->nchunks = 2;
    job->to_req  = 0;                          // and be a get
    EXPECT_EQ(0u, rdmach_shm_copy_help(&d.owner.own, &kAnyPeer, 0));
    job->to_req  = 1;
    EXPECT_EQ(2u, rdmach_shm_copy_help(&d.owner.own, &kAnyPeer, 0));
    EXPECT_EQ(0, rdmach_shm_copy_advance(&req, 0));
    EXPECT_EQ(src, dst);
}

// Readers reuse the desk's slots with staged gets and plain copies mixed while the owner's
// thread helps: every copy exact (an owner that kept a finished job's fields must never stage
// a piece into the next one). (The owner's thread may get no CPU on a loaded machine.)
TEST(RdmachShmStage, ReadersReuseSlotsWhileTheOwnerStages)
{
    Desk d;
    EXPECT_EQ(0u, readers_reuse_slots(d, RDMACH_SHM_STAGE_MAX, [&](rdmach_shm_seg_t *peer,
                                                                   int i,
                                                                   std::vector<uint8_t> &src,
                                                                   std::vector<uint8_t> &dst) {
        rdmach_shm_copy_req_t req;
        int ret;
        if (i % 2 != 0) {
            return rdmach_shm_copy_run(peer, 0, &d.reader.own, dst.data(),
                                       reinterpret_cast<uintptr_t>(src.data()), src.size(), 0, 0);
        }
        ret = rdmach_shm_copy_post_staged(&req, peer, 0, &d.reader.own, dst.data(),
                                          reinterpret_cast<uintptr_t>(src.data()), src.size(), 0);
        if (ret == 0) {
            while ((ret = rdmach_shm_copy_advance(&req, 0)) == RDMACH_SHM_COPY_PENDING) {
            }
        }
        return ret;
    }));
    EXPECT_EQ(0u, d.owner.own.hdr->copy_busy);
    EXPECT_EQ(0u, d.owner.own.hdr->copy_active);
}

// Where gets may go staged, the staging buffers are made resident when the segment opens,
// so that no get's first pieces pay a page fault on each side (the staged-or-not pick's first
// staged samples did, and went to the page walk for it); where none may, they stay untouched
// address space. Seen through the segment's memfd, which the iface address names.
TEST(RdmachWireShmStage, StagingBuffersAreResidentOnlyWhereGetsMayStage)
{
    auto resident = [](const Wire &wire) {
        int32_t fd;
        std::memcpy(&fd, wire.addr.data() + sizeof(int32_t), sizeof(fd));   // pid, fd, id
        struct stat st;
        EXPECT_EQ(0, fstat(fd, &st));
        const size_t page = 4096, size = static_cast<size_t>(st.st_size);
        void *p = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
        EXPECT_NE(MAP_FAILED, p);
        auto *hdr = static_cast<rdmach_shm_hdr_t*>(p);
        const size_t off = rdmach_shm_stage_at(hdr, 0, 0, 0) - static_cast<uint8_t*>(p),
                     len = off + RDMACH_SHM_STAGE_BYTES;
        std::vector<unsigned char> vec((len + page - 1) / page);
        EXPECT_EQ(0, mincore(p, len, vec.data()));
        size_t n = 0;
        for (size_t i = off / page; i < vec.size(); ++i) {
            n += vec[i] & 1;
        }
        munmap(p, size);
        return n;
    };
    const size_t pages = (RDMACH_SHM_STAGE_BYTES + 4095) / 4096;
    Wire walks(4, 8, 0x5eed, 0, 0), stages(4, 8, 0x5eed, 0, RDMACH_WIRE_STAGE_MAX);
    EXPECT_EQ(0u, resident(walks));
    EXPECT_EQ(pages, resident(stages));
}

// Through the wire table: a posted get is staged by the owner's progress and completes from
// the reader's; with every posted entry taken, a get is staged at once, the reader advancing
// its posted ones meanwhile so that the owner goes on with them too.
TEST(RdmachWireShmStage, PostedAndWindowedGetsAreStaged)
{
    CopyPair c(RDMACH_WIRE_STAGE_MAX);
    const size_t len = 256 * 1024;
    std::vector<uint8_t> src = pattern(len, 13);
    std::vector<std::vector<uint8_t>> dst(20, std::vector<uint8_t>(len));
    std::vector<Done> ops(20);
    rdmach_wire_iov_t iov = {dst[0].data(), len, nullptr};

    ASSERT_EQ(RDMACH_WIRE_INPROGRESS,
              c.b.ops->rma(c.b.w, c.peer, &iov, 1, reinterpret_cast<uintptr_t>(src.data()), 0,
                           len, 0, nullptr, &ops[0]));
    EXPECT_EQ(1u, c.b.wire_stats.copy_staged);
    while (ops[0].calls == 0) {
        c.a.ops->progress(c.a.w);
        c.b.ops->progress(c.b.w);
    }
    EXPECT_EQ(0, ops[0].err);
    EXPECT_EQ(src, dst[0]);
    EXPECT_EQ(16u, c.a.wire_stats.copy_helped) << "the owner staged every piece";
    EXPECT_EQ(0u, c.b.wire_stats.copy_unstaged);

    std::atomic<bool> stop{false};
    std::thread owner([&] {
        while (!stop.load()) {
            c.a.ops->progress(c.a.w);
        }
    });
    int posted = 0, sync = 0;
    get_window(c, src, dst, ops, 1, 20, &posted, &sync);
    EXPECT_EQ(16, posted);
    EXPECT_EQ(3, sync);
    while (std::any_of(ops.begin() + 1, ops.end() - 3, [](const Done &o) { return !o.calls; })) {
        c.b.ops->progress(c.b.w);
    }
    stop = true;
    owner.join();
    for (int i = 0; i < 20; ++i) {
        EXPECT_EQ(src, dst[i]) << i;
        EXPECT_EQ((i < 17) ? 1 : 0, ops[i].calls) << i;
        EXPECT_EQ((i < 17) ? 0 : 1, ops[i].err) << i;
    }
    EXPECT_EQ(20u, c.b.wire_stats.copy_staged);
    EXPECT_EQ(0u, c.b.ops->progress(c.b.w));
}

// ---- the desk against a hostile peer: every word of it is anyone's who maps the owner's
// segment, and may change between two of our reads ----

namespace {

// One registration of the owner's, [addr, addr + len): may_read's answer, overflow-safe as
// the md's (uct_rdmach_md_covers).
struct OneReg {
    uint64_t addr, len;
    static int covers(void *arg, uint64_t address, uint64_t length)
    {
        const OneReg *r = static_cast<const OneReg*>(arg);
        uint64_t off    = address - r->addr;
        return (address >= r->addr) && (off <= r->len) && (length <= r->len - off);
    }
};

// Runs fn in a thread for at most limit seconds; if it is still running then, release() is
// called (to let a reader that would wait forever go) before the thread is joined. Did fn
// end within the limit?
bool ends_within(double limit, const std::function<void()> &fn,
                 const std::function<void()> &release)
{
    std::atomic<bool> over{false};
    std::thread t([&] {
        fn();
        over = true;
    });
    auto t0 = std::chrono::steady_clock::now();
    while (!over.load() &&
           (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() <
            limit)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    bool ended = over.load();
    if (!ended) {
        release();
    }
    t.join();
    return ended;
}

}  // namespace

// A hostile owner claims every chunk of an 8-chunk get, says all are done and gives back
// chunk 63: the reader copies only given-back chunks of its own job, never a chunk at
// local + 63 * chunk (past its buffer; here the buffers span 64 chunks so that such a copy
// shows as bytes written instead of a fault).
TEST(RdmachShmHostile, AGivenBackBitBeyondTheJobIsNeverCopied)
{
    Desk d;
    const size_t chunk = 32 * 1024, len = 8 * chunk;
    std::vector<uint8_t> src = pattern(64 * chunk, 3), dst(64 * chunk, 0);
    rdmach_shm_copy_req_t req;

    ASSERT_EQ(0, rdmach_shm_copy_post(&req, &d.owner_by_reader, 0, &d.reader.own, dst.data(),
                                      reinterpret_cast<uintptr_t>(src.data()), nullptr, len, 0,
                                      RDMACH_SHM_COPY_SPLIT, 0));
    ASSERT_EQ(8u, req.nchunks);
    ASSERT_EQ(chunk, req.chunk);
    rdmach_shm_copy_t *job = req.job;
    job->claim      = (req.gen << 32) | 8;
    job->done       = 0xff;
    job->given_back = (1ull << 63) | (1ull << 8);
    EXPECT_EQ(0, rdmach_shm_copy_advance(&req, 1));
    EXPECT_TRUE(std::all_of(dst.begin() + len, dst.end(), [](uint8_t x) { return x == 0; }))
        << "a chunk beyond the job was copied";

    // a given-back chunk of the job is still ours to copy
    std::fill(dst.begin(), dst.end(), 0);
    ASSERT_EQ(0, rdmach_shm_copy_post(&req, &d.owner_by_reader, 0, &d.reader.own, dst.data(),
                                      reinterpret_cast<uintptr_t>(src.data()), nullptr, len, 0,
                                      RDMACH_SHM_COPY_SPLIT, 0));
    job->claim      = (req.gen << 32) | 8;
    job->done       = 0x7f;
    job->given_back = 0x80 | (1ull << 63);
    EXPECT_EQ(0, rdmach_shm_copy_advance(&req, 1));
    EXPECT_TRUE(std::equal(src.begin() + 7 * chunk, src.begin() + len, dst.begin() + 7 * chunk));
    EXPECT_TRUE(std::all_of(dst.begin() + len, dst.end(), [](uint8_t x) { return x == 0; }));
    EXPECT_EQ(0u, d.owner.own.hdr->copy_busy);
}

// Anyone who maps the owner's segment can write a job on its desk naming a known reader: the
// owner copies only inside its registrations, both ways (a put would write our memory at
// owner_addr, a get leak it to the reader), and never for a range that runs out of one or
// wraps. Left alone, such a job is the reader's to copy.
TEST(RdmachShmHostile, TheOwnerCopiesOnlyInsideItsRegistrations)
{
    Desk d;
    char reg[64] = "registered", victim[64] = "victim", secret[64] = "secret";
    char peer_buf[64] = "reader's";
    OneReg r{reinterpret_cast<uintptr_t>(reg), sizeof(reg)};
    const rdmach_shm_helper_t helper = {any_peer, OneReg::covers, nullptr, &r};
    rdmach_shm_copy_t *job = &d.owner.own.hdr->copy[3];
    uint64_t gen = 5;
    auto post = [&](const void *owner_addr, uint64_t len, int to_req) {
        job->claim       = (++gen << 32) | RDMACH_SHM_COPY_CLOSED;
        job->done        = 0;
        job->given_back  = 0;
        job->pid         = getpid();
        job->seg_id      = 0x1234;
        job->nchunks     = 1;
        job->chunk       = len;
        job->len         = len;
        job->owner_addr  = reinterpret_cast<uintptr_t>(owner_addr);
        job->req_addr    = reinterpret_cast<uintptr_t>(peer_buf);
        job->to_req      = to_req;
        job->staged_mode = 0;
        job->claim       = gen << 32;
        d.owner.own.hdr->copy_active = 1u << 3;
    };

    post(victim, sizeof(victim), 0);   // a put into memory we never registered
    EXPECT_EQ(0u, rdmach_shm_copy_help(&d.owner.own, &helper, 0));
    EXPECT_STREQ("victim", victim) << "written outside the registrations";
    EXPECT_EQ(gen << 32, job->claim) << "nothing claimed: the reader's to copy";
    post(secret, sizeof(secret), 1);   // a get of it
    EXPECT_EQ(0u, rdmach_shm_copy_help(&d.owner.own, &helper, 0));
    EXPECT_STREQ("reader's", peer_buf) << "leaked from outside the registrations";
    post(reg + 32, 64, 1);             // starts inside, runs out
    EXPECT_EQ(0u, rdmach_shm_copy_help(&d.owner.own, &helper, 0));
    post(reinterpret_cast<const void*>(UINT64_MAX - 31), 64, 0);   // wraps
    EXPECT_EQ(0u, rdmach_shm_copy_help(&d.owner.own, &helper, 0));
    EXPECT_STREQ("reader's", peer_buf);

    // inside: copied, both ways
    post(reg, sizeof(reg), 1);
    EXPECT_EQ(1u, rdmach_shm_copy_help(&d.owner.own, &helper, 0));
    EXPECT_STREQ("registered", peer_buf);
    strcpy(peer_buf, "put");
    post(reg, sizeof(reg), 0);
    EXPECT_EQ(1u, rdmach_shm_copy_help(&d.owner.own, &helper, 0));
    EXPECT_STREQ("put", reg);
    // without a registration check nothing is copied
    const rdmach_shm_helper_t no_check = {any_peer, nullptr, nullptr, nullptr};
    post(reg, sizeof(reg), 1);
    EXPECT_EQ(0u, rdmach_shm_copy_help(&d.owner.own, &no_check, 0));
    d.owner.own.hdr->copy_active = 0;
}

// An owner (or anyone who maps its segment) that claims every chunk and never copies: a
// reader that waits fails the copy (-ETIMEDOUT) after a few seconds instead of spinning
// forever, and keeps the desk slot (the owner may still store into it when it goes on).
TEST(RdmachShmHostile, AClaimThatNeverEndsFailsTheCopy)
{
    Desk d;
    const size_t len = 8 * 32 * 1024;
    std::vector<uint8_t> src = pattern(len, 2), dst(len);
    rdmach_shm_copy_req_t req;
    int ret = 1;

    ASSERT_EQ(0, rdmach_shm_copy_post(&req, &d.owner_by_reader, 0, &d.reader.own, dst.data(),
                                      reinterpret_cast<uintptr_t>(src.data()), nullptr, len, 0,
                                      RDMACH_SHM_COPY_SPLIT, 0));
    rdmach_shm_copy_t *job = req.job;
    job->claim = (req.gen << 32) | req.nchunks;   // every chunk the owner's
    job->done  = 0x0f;                            // half of them end, the rest never
    EXPECT_TRUE(ends_within(30, [&] { ret = rdmach_shm_copy_advance(&req, 1); },
                            [&] { job->done = 0xff; }))
        << "the reader waited on";
    EXPECT_EQ(-ETIMEDOUT, ret);
    EXPECT_EQ(1u << req.slot, d.owner.own.hdr->copy_busy) << "the slot is kept";
    EXPECT_EQ(0u, d.owner.own.hdr->copy_active);
    EXPECT_EQ(RDMACH_SHM_COPY_CLOSED, static_cast<uint32_t>(job->claim));
    d.owner.own.hdr->copy_busy = 0;   // the owner's reap, when we are gone
}

// The same for a staged get, advanced without waiting (as rdmach_shm_staged_run and the
// wire's progress do): the owner claims every piece and stages none.
TEST(RdmachShmHostile, AStagedClaimThatNeverEndsFailsTheCopy)
{
    Desk d;
    const size_t len = 20 * RDMACH_SHM_STAGE_PIECE;
    std::vector<uint8_t> src = pattern(len, 2), dst(len);
    rdmach_shm_copy_req_t req;
    int ret = RDMACH_SHM_COPY_PENDING;

    ASSERT_EQ(0, rdmach_shm_copy_post_staged(&req, &d.owner_by_reader, 0, &d.reader.own,
                                             dst.data(), reinterpret_cast<uintptr_t>(src.data()),
                                             len, 0));
    rdmach_shm_copy_t *job = req.job;
    job->claim = (req.gen << 32) | req.nchunks;
    auto t0 = std::chrono::steady_clock::now();
    while ((ret == RDMACH_SHM_COPY_PENDING) &&
           (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 30)) {
        ret = rdmach_shm_copy_advance(&req, 0);
    }
    EXPECT_EQ(-ETIMEDOUT, ret);
    EXPECT_EQ(1u << req.slot, d.owner.own.hdr->copy_busy) << "the slot is kept";
    EXPECT_EQ(0u, d.owner.own.hdr->copy_active);
    d.owner.own.hdr->copy_busy = 0;
}
