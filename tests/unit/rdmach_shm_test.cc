// Unit tier for the rdmach shared-memory wire (uct/rdmach/rdmach_shm.[ch]): a peer's segment is
// validated before use, and a segment's owner never takes its layout from the shared header,
// which every peer can write.
#include "rdmach_shm.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <unistd.h>

namespace {

struct Seg {
    Seg()
    {
        EXPECT_EQ(nullptr, rdmach_geom_init(&geom, 256, 64, 4096, 0.25));
        EXPECT_EQ(0, rdmach_shm_create(&own, &geom, 8, 0x1234));
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
