/*
 * Writes the seed corpora of the decoder fuzzers: gen_corpus <dir> fills <dir>/udz (ud_zcopy:
 * one valid datagram of every type, in the scene udz_fuzz.cc builds, plus a few sequences),
 * <dir>/rdmach (rdmach ring records: honest traffic, pipelined chunks, wrap-around with pads,
 * corrupt headers and marks, the peer's control words), <dir>/rdmach_serve (served atomics,
 * puts and gets aimed at a target's registrations, and raw ones) and <dir>/unimem (mailbox messages:
 * SHORT, fragmented, interleaved senders, corrupt ones). The files are checked in under
 * tests/fuzz/corpus; rerun this after a wire format change.
 */
#include "udz_proto.h"
#include "udz_fuzz.h"
#include "rdmach_ring.h"
#include "rdmach_fuzz.h"
#include "rdmach_serve.h"
#include "unimem_proto.h"
#include "unimem_fuzz.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <sys/stat.h>
#include <vector>

typedef std::vector<uint8_t> Bytes;

static Bytes dg(uint8_t type, uint8_t flags, uint32_t psn, uint32_t ack, const void *body,
                size_t len, uint8_t am_id = 0)
{
    udz_hdr_t h;
    memset(&h, 0, sizeof(h));
    h.magic = UDZ_MAGIC;
    h.version = UDZ_VERSION;
    h.type = type;
    h.flags = flags;
    h.am_id = am_id;
    h.len = (uint16_t)len;
    h.dst_cookie = UDZF_COOKIE_A;
    h.src_cookie = UDZF_COOKIE_P;
    h.psn = psn;
    h.ack = ack;
    Bytes v((uint8_t*)&h, (uint8_t*)&h + sizeof(h));
    v.insert(v.end(), (const uint8_t*)body, (const uint8_t*)body + len);
    return v;
}

static void rec(Bytes &out, uint8_t ctl, const Bytes &d)
{
    out.push_back(ctl);
    out.push_back((uint8_t)(d.size() & 0xff));
    out.push_back((uint8_t)(d.size() >> 8));
    out.insert(out.end(), d.begin(), d.end());
}

static int put(const std::string &dir, const char *name, const Bytes &b)
{
    std::string path = dir + "/" + name;
    FILE *f = fopen(path.c_str(), "wb");
    if (f == NULL || fwrite(b.data(), 1, b.size(), f) != b.size()) {
        perror(path.c_str());
        return 1;
    }
    fclose(f);
    return 0;
}

static int gen_udz(const std::string &dir)
{
    int rc = 0;
    uint8_t payload[300];
    for (int i = 0; i < 300; ++i) payload[i] = (uint8_t)i;

    udz_zreq_t zr;
    memset(&zr, 0, sizeof(zr));
    zr.xfer_id = 77; zr.chan_id = 1; zr.addr = UDZF_REGION_ADDR + 16; zr.len = 2000;
    zr.chunk = 256; zr.window = 4;
    memset(zr.rkey, UDZF_RKEY_BYTE, sizeof(zr.rkey));
    udz_zack_t za = {77, 2, 0x5};
    udz_zack_t za1 = {1, 1, 0x2};
    udz_zerr_t ze = {1, -13};
    uint8_t putb[sizeof(udz_put_t) + 40];
    udz_put_t pt;
    pt.addr = UDZF_REGION_ADDR + 100;
    memset(pt.rkey, UDZF_RKEY_BYTE, sizeof(pt.rkey));
    memcpy(putb, &pt, sizeof(pt));
    memset(putb + sizeof(pt), 0xab, 40);

    Bytes b;
    b.clear(); rec(b, 0x10, dg(UDZ_T_AM, 0, 1, 2, "hello, ud_zcopy", 15, 5)); rc |= put(dir, "am", b);
    b.clear(); rec(b, 0x10, dg(UDZ_T_ACK, 0, 0, 3, NULL, 0)); rc |= put(dir, "ack", b);
    b.clear(); rec(b, 0x10, dg(UDZ_T_ACK, UDZ_F_NAK, 0, 2, NULL, 0)); rc |= put(dir, "nak", b);
    b.clear(); rec(b, 0x10, dg(UDZ_T_ZREQ, 0, 1, 4, &zr, sizeof(zr))); rc |= put(dir, "zreq", b);
    {
        /* data channels P never announced: one past its 2, and a port (the first wire's name) */
        udz_zreq_t bad = zr;
        b.clear();
        bad.chan_id = 2;
        rec(b, 0x10, dg(UDZ_T_ZREQ, 0, 1, 4, &bad, sizeof(bad)));
        bad.chan_id = 40999; bad.xfer_id = 78;
        rec(b, 0x10, dg(UDZ_T_ZREQ, 0, 2, 4, &bad, sizeof(bad)));
        rc |= put(dir, "zreq_bad_chan", b);
    }
    b.clear(); rec(b, 0x10, dg(UDZ_T_ZREQ, 0, 1, 4, &zr, sizeof(zr)));
    rec(b, 0x20, dg(UDZ_T_ZACK, 0, 77, 4, &za, UDZ_ZACK_LEN(1)));
    rec(b, 0x20, dg(UDZ_T_ZACK, UDZ_F_STUCK, 77, 4, &za, UDZ_ZACK_LEN(1)));
    za.sack[3] = 0x8000000000000001ull;     /* a wide selective ack: holes far up */
    rec(b, 0x20, dg(UDZ_T_ZACK, 0, 77, 4, &za, UDZ_ZACK_LEN(4)));
    rec(b, 0x10, dg(UDZ_T_ZDONE, 0, 77, 4, NULL, 0)); rc |= put(dir, "zreq_zack_zdone", b);
    /* the requester's reliable ZFIN ends the owner's transfer */
    udz_zfin_t zf = {77};
    b.clear(); rec(b, 0x10, dg(UDZ_T_ZREQ, 0, 1, 4, &zr, sizeof(zr)));
    rec(b, 0x10, dg(UDZ_T_ZFIN, 0, 2, 4, &zf, sizeof(zf))); rc |= put(dir, "zreq_zfin", b);
    b.clear(); rec(b, 0x10, dg(UDZ_T_ZACK, 0, 1, 1, &za1, UDZ_ZACK_LEN(1))); rc |= put(dir, "zack", b);
    b.clear(); rec(b, 0x10, dg(UDZ_T_ZDONE, 0, 1, 1, NULL, 0)); rc |= put(dir, "zdone", b);
    b.clear(); rec(b, 0x10, dg(UDZ_T_ZERR, 0, 1, 1, &ze, sizeof(ze))); rc |= put(dir, "zerr", b);
    b.clear(); rec(b, 0x10, dg(UDZ_T_PUT, 0, 1, 1, putb, sizeof(putb))); rc |= put(dir, "put", b);
    /* ZDATA of get 1 (xfer 1 on channel 1): chunks 0..3, the last one short; out of order */
    b.clear();
    rec(b, 0x01, dg(UDZ_T_ZDATA, 0, 1, 0, payload, UDZF_CHUNK));
    rec(b, 0x01, dg(UDZ_T_ZDATA, 0, 1, 2, payload, UDZF_CHUNK));
    rec(b, 0x01, dg(UDZ_T_ZDATA, 0, 1, 3, payload, UDZF_GET1_LEN - 3 * UDZF_CHUNK));
    rec(b, 0x11, dg(UDZ_T_ZDATA, 0, 1, 1, payload, UDZF_CHUNK));
    rc |= put(dir, "zdata_get1", b);
    b.clear();
    rec(b, 0x02, dg(UDZ_T_ZDATA, 0, 2, 5, payload, UDZF_CHUNK));
    rec(b, 0x02, dg(UDZ_T_ZDATA, 0, 2, 27, payload, UDZF_GET2_LEN - 27 * UDZF_CHUNK));
    rec(b, 0x02, dg(UDZ_T_ZDATA, 0, 1, 0, payload, UDZF_CHUNK));     /* other transfer: stale */
    rc |= put(dir, "zdata_get2", b);
    /* reliable stream: in order, duplicate, gap */
    b.clear();
    rec(b, 0x00, dg(UDZ_T_AM, 0, 1, 1, "a", 1));
    rec(b, 0x00, dg(UDZ_T_AM, UDZ_F_ACK_REQ, 2, 1, "bb", 2));
    rec(b, 0x00, dg(UDZ_T_AM, 0, 2, 1, "bb", 2));
    rec(b, 0x00, dg(UDZ_T_AM, 0, 5, 4, "ccc", 3));
    rec(b, 0x03, dg(UDZ_T_AM, 0, 1, 1, "q", 1));                        /* from Q */
    rc |= put(dir, "am_stream", b);
    /* a restart: the same address with a new cookie (no fixup: the cookie is in the bytes) */
    b.clear();
    Bytes r = dg(UDZ_T_AM, 0, 1, 1, "new", 3);
    uint64_t nc = 0x6060606060606060ull;
    memcpy(r.data() + 16, &nc, 8);
    rec(b, 0x00, r);
    rec(b, 0x00, dg(UDZ_T_AM, 0, 9, 1, "old", 3));
    rc |= put(dir, "restart", b);
    /* events: the region deregistered while a transfer is served from it (revoked: ZERR),
     * and unreachable reports about P (probed) and Q */
    b.clear(); rec(b, 0x10, dg(UDZ_T_ZREQ, 0, 1, 4, &zr, sizeof(zr)));
    rec(b, 0x10 | UDZF_CTL_EVENT | 1, Bytes());
    rec(b, 0x20, dg(UDZ_T_ZACK, UDZ_F_STUCK, 77, 4, &za, UDZ_ZACK_LEN(1)));
    rec(b, 0x10, dg(UDZ_T_ZFIN, 0, 2, 4, &zf, sizeof(zf))); rc |= put(dir, "zreq_dereg", b);
    b.clear(); rec(b, 0x10 | UDZF_CTL_EVENT, Bytes());
    rec(b, 0x10, dg(UDZ_T_ACK, 0, 0, 1, NULL, 0));
    rec(b, 0x10 | UDZF_CTL_EVENT | 3, Bytes());
    rec(b, 0xf0 | UDZF_CTL_EVENT, Bytes()); rc |= put(dir, "unreach", b);
    return rc;
}

/* ---- rdmach ring records (rdmach_fuzz.h) ---- */

static void le(Bytes &out, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; ++i) {
        out.push_back((uint8_t)(v >> (8 * i)));
    }
}

static void r_send(Bytes &b, int ring, uint32_t len, uint8_t am_id)
{
    b.push_back(RDMACHF_OPB(RDMACHF_OP_SEND, ring, 0));
    le(b, len, 2);
    b.push_back(am_id);
}

static void r_op(Bytes &b, int what, int ring, int n = 0)
{
    b.push_back(RDMACHF_OPB(what, ring, n));
}

static void r_forge(Bytes &b, int ring, int mark, uint32_t length, uint16_t nslots, uint8_t type,
                    uint8_t am_id = 0)
{
    r_op(b, RDMACHF_OP_FORGE, ring, mark);
    le(b, length, 4);
    le(b, nslots, 2);
    b.push_back(type);
    b.push_back(am_id);
}

static void r_ctl(Bytes &b, int ring, int what, uint64_t value)
{
    r_op(b, RDMACHF_OP_CTL, ring);
    b.push_back((uint8_t)what);
    le(b, value, 8);
}

static int gen_rdmach(const std::string &dir)
{
    int rc = 0;
    Bytes b;

    /* geometry 1 (64 x 64-byte slots, 1000-byte chunks): short and full-chunk records on a
     * mapped and a posted ring, then the poller */
    b.assign(1, RDMACHF_CFG(1, 0, 4, 3));
    r_send(b, 0, 5, 1); r_send(b, 0, 48, 2); r_send(b, 0, 200, 3);
    r_send(b, 3, 1000, 4); r_send(b, 2, 0, 5);
    r_op(b, RDMACHF_OP_POLL, 0, 1);
    r_send(b, 0, 7, 6);
    r_op(b, RDMACHF_OP_POLL1, 0);
    rc |= put(dir, "send", b);

    /* a large message pipelined in chunk records through the gated (RC + SRQ) ring */
    b.assign(1, RDMACHF_CFG(1, 0, 2, 2));
    r_op(b, RDMACHF_OP_PIPE, 1); le(b, 8000, 2);
    r_op(b, RDMACHF_OP_PIPE, 0); le(b, 2500, 2);
    r_op(b, RDMACHF_OP_POLL, 0, 3);
    rc |= put(dir, "pipe", b);

    /* geometry 0 (16 slots, 100-byte chunks): many laps, sizes that force pads at the end */
    b.assign(1, RDMACHF_CFG(0, 0, 4, 0));
    for (int i = 0; i < 40; ++i) {
        r_send(b, (i & 1) ? 3 : 0, (uint32_t)(i * 37 % 101), (uint8_t)i);
        r_op(b, RDMACHF_OP_POLL1, (i & 1) ? 3 : 0);
        if (i % 5 == 4) {
            r_op(b, RDMACHF_OP_POLL, 0);
        }
    }
    rc |= put(dir, "wrap_pads", b);

    /* geometry 2 (128-byte slots): pads on the posted ring */
    b.assign(1, RDMACHF_CFG(2, 0, 4, 1));
    for (int i = 0; i < 12; ++i) {
        r_send(b, 1, (uint32_t)(300 + i * 61), (uint8_t)i);
        r_op(b, RDMACHF_OP_POLL, 1, 1);
    }
    rc |= put(dir, "wrap_posted", b);

    /* corrupt headers, each polled alone, then the sender goes on after it (the unit test's) */
    b.assign(1, RDMACHF_CFG(1, 0, 4, 3));
    r_op(b, RDMACHF_OP_POLL, 0, 3);     /* the first sweep activates the rings */
    const struct { uint32_t length; uint16_t nslots; uint8_t type; } bad[] = {
        {1u << 30, 1, RDMACH_REC_AM}, {200, 1, RDMACH_REC_AM}, {10, 0, RDMACH_REC_AM},
        {10, 1000, RDMACH_REC_AM}, {10, 1, 99}, {0, 3, RDMACH_REC_PAD}, {10, 17, RDMACH_REC_AM},
    };
    for (const auto &x : bad) {
        r_forge(b, 0, 0, x.length, x.nslots, x.type);
        r_op(b, RDMACHF_OP_POLL1, 0);
        r_op(b, RDMACHF_OP_SYNC, 0);
        r_send(b, 0, 8, 9);
        r_op(b, RDMACHF_OP_POLL1, 0);
    }
    r_forge(b, 0, 0, 8, 1, RDMACH_REC_AM, 200);     /* a valid record, AM id beyond UCT's */
    r_op(b, RDMACHF_OP_POLL1, 0);
    rc |= put(dir, "corrupt_headers", b);

    /* marks of another lap or none, a pad at the ring's end, raw bytes over a record */
    b.assign(1, RDMACHF_CFG(3, 0, 4, 3));
    r_op(b, RDMACHF_OP_POLL, 0, 3);
    for (int m = 1; m < 4; ++m) {
        r_forge(b, 2, m, 8, 1, RDMACH_REC_AM);
        r_op(b, RDMACHF_OP_POLL1, 2);
    }
    for (int i = 0; i < 7; ++i) {
        r_send(b, 2, 100, 1);
    }
    r_op(b, RDMACHF_OP_POLL, 2);
    r_forge(b, 2, 0, 0, 1, RDMACH_REC_PAD);          /* the last slot: a valid pad */
    r_op(b, RDMACHF_OP_POLL1, 2);
    r_op(b, RDMACHF_OP_RAW, 2); b.push_back(0); b.push_back(8); b.push_back(8);
    le(b, 0xffffffffu, 4); le(b, 0x0101, 2); b.push_back(RDMACH_REC_AM); b.push_back(0);
    r_op(b, RDMACHF_OP_RAW, 2); b.push_back(0); b.push_back(0); b.push_back(8);
    le(b, 9, 8);                                     /* mark = position 8 + 1 */
    r_op(b, RDMACHF_OP_POLL1, 2);
    rc |= put(dir, "marks", b);

    /* the peers' control words: claim counter, owner, doorbells, completions, credit */
    b.assign(1, RDMACHF_CFG(1, 0, 2, 2));
    r_ctl(b, 0, RDMACHF_CTL_CLAIM, 0xffffffffull);
    r_ctl(b, 2, RDMACHF_CTL_OWNER, 0);
    r_send(b, 2, 30, 1); r_send(b, 4, 30, 2);
    r_op(b, RDMACHF_OP_POLL, 0, 3);
    r_ctl(b, 4, RDMACHF_CTL_OWNER, 0x77);
    r_ctl(b, 4, RDMACHF_CTL_DOORBELL, 1);
    r_ctl(b, 2, RDMACHF_CTL_OWNER, 1);
    r_op(b, RDMACHF_OP_POLL, 0, 3);
    r_ctl(b, 1, RDMACHF_CTL_AVAIL, 5);
    r_send(b, 1, 64, 3);
    r_op(b, RDMACHF_OP_POLL, 0);
    r_ctl(b, 0, RDMACHF_CTL_TAIL, 1000000);
    for (int i = 0; i < 10; ++i) {
        r_send(b, 0, 900, 4);
    }
    r_op(b, RDMACHF_OP_POLL, 0, 3);
    r_ctl(b, 0, RDMACHF_CTL_CLAIM, 2);
    r_ctl(b, 3, RDMACHF_CTL_DOORBELL, 0xff);
    r_op(b, RDMACHF_OP_POLL, 0, 3);
    rc |= put(dir, "ctl_words", b);

    /* every ring polled every call (the paper's way) */
    b.assign(1, RDMACHF_CFG(1, 1, 4, 1));
    for (int i = 0; i < 5; ++i) {
        r_send(b, i, (uint32_t)(10 * i + 1), (uint8_t)i);
    }
    r_op(b, RDMACHF_OP_POLL, 0, 1);
    rc |= put(dir, "poll_all", b);

    /* a hot list of one, one record per call: demotions, doorbells, sweeps */
    b.assign(1, RDMACHF_CFG(0, 0, 1, 0));
    for (int lap = 0; lap < 3; ++lap) {
        for (int i = 0; i < 4; ++i) {
            r_send(b, i, 20, (uint8_t)i);
            r_send(b, i, 20, (uint8_t)i);
            r_op(b, RDMACHF_OP_POLL, 0, 1);
        }
        r_op(b, RDMACHF_OP_POLL, 0, 3);
        r_op(b, RDMACHF_OP_POLL, 0, 3);
    }
    rc |= put(dir, "hot_cap", b);

    /* the demotion race on a posted ring: a record lands as the receiver demotes the ring */
    b.assign(1, RDMACHF_CFG(1, 0, 4, 3));
    r_send(b, 3, 40, 1);
    r_op(b, RDMACHF_OP_POLL, 0);
    b.push_back(RDMACHF_OPB(RDMACHF_OP_SEND, 3, 1)); le(b, 50, 2); b.push_back(2);
    r_op(b, RDMACHF_OP_POLL, 0, 3);
    r_op(b, RDMACHF_OP_POLL, 0, 3);
    rc |= put(dir, "demotion_race", b);
    return rc;
}

/* ---- unimem mailbox messages (unimem_fuzz.h) ---- */

static void u_rec(Bytes &out, uint8_t ctl, const uint8_t *msg)
{
    out.push_back(ctl);
    out.insert(out.end(), msg, msg + UNIMEM_HAL_MSG_SIZE);
}

static void u_msg(Bytes &out, uint8_t ctl, uint8_t type, uint8_t am_id, uint8_t b1,
                  uint16_t sender, uint32_t total, uint8_t fill)
{
    uint8_t m[UNIMEM_HAL_MSG_SIZE];
    memset(m, fill, sizeof(m));
    m[0] = (uint8_t)((type << 5) | (am_id & 0x1f));
    m[1] = b1;
    if (type != UNIMEM_PROTO_SHORT) {
        m[2] = (uint8_t)sender;
        m[3] = (uint8_t)(sender >> 8);
    }
    if (type == UNIMEM_PROTO_FIRST) {
        for (int i = 0; i < 4; ++i) {
            m[4 + i] = (uint8_t)(total >> (8 * i));
        }
    }
    u_rec(out, ctl, m);
}

static void u_pack(Bytes &out, uint8_t ctl, uint8_t am_id, uint16_t sender, uint16_t len,
                   uint8_t seed)
{
    uint8_t m[UNIMEM_HAL_MSG_SIZE] = {am_id, (uint8_t)sender, (uint8_t)(sender >> 8),
                                      (uint8_t)len, (uint8_t)(len >> 8), seed};
    u_rec(out, (uint8_t)(UNIMEMF_PACK | ctl), m);
}

/* a LAND or LANDI (unimem_proto.h) of len bytes into (sender, slot); ctl UNIMEMF_STORE has
 * the fuzzer store the slot first with pattern 'pattern' (byte 31) */
static void u_land_bad(Bytes &out, uint8_t type, uint8_t am_id, uint16_t sender, uint8_t slot,
                       uint32_t len, uint8_t ctl, uint8_t pattern = 0)
{
    uint8_t m[UNIMEM_HAL_MSG_SIZE];
    for (int i = 0; i < UNIMEM_HAL_MSG_SIZE; ++i) {
        m[i] = (uint8_t)(i * 11 + pattern);   /* LANDI: its inline head */
    }
    m[0] = (uint8_t)((type << 5) | (am_id & 0x1f));
    m[1] = slot;
    m[2] = (uint8_t)sender;
    m[3] = (uint8_t)(sender >> 8);
    for (int i = 0; i < 4; ++i) {
        m[4 + i] = (uint8_t)(len >> (8 * i));
    }
    m[31] = pattern;
    u_rec(out, (uint8_t)(UNIMEMF_RAW | ctl), m);
}

static void u_land(Bytes &out, uint8_t type, uint8_t am_id, uint16_t sender, uint8_t slot,
                   uint32_t len, uint8_t pattern)
{
    u_land_bad(out, type, am_id, sender, slot, len, UNIMEMF_STORE, pattern);
}

static void u_op(Bytes &out, uint8_t what, uint8_t arg = 0)
{
    uint8_t m[UNIMEM_HAL_MSG_SIZE] = {arg};
    u_rec(out, what, m);
}

static int gen_unimem(const std::string &dir)
{
    int rc = 0;
    Bytes b;
    const uint8_t raw = UNIMEMF_RAW, grp = UNIMEMF_RAW | UNIMEMF_GROUP;

    /* SHORT messages of 0..30 bytes through the mailbox, one per group and in groups */
    b.assign(1, UNIMEMF_CFG(2, 1, 1, 0));
    for (uint8_t len = 0; len <= UNIMEM_PROTO_SHORT_MAX; len += 3) {
        u_msg(b, (len % 2) ? grp : raw, UNIMEM_PROTO_SHORT, len, len, 0, 0, len);
    }
    u_msg(b, raw, UNIMEM_PROTO_SHORT, 9, 30, 0, 0, 0xab);
    rc |= put(dir, "short", b);

    /* fragmented messages sent as one group each (the glue's am_bcopy): the smallest, one
     * with a short last CONT, and the largest SEG_SIZE of 8192 (sequence numbers wrap) */
    b.assign(1, UNIMEMF_CFG(3, 1, 3, 0));
    u_pack(b, UNIMEMF_GROUP, 3, 1, 31, 1);
    u_pack(b, UNIMEMF_GROUP, 4, 2, 100, 2);
    u_pack(b, UNIMEMF_GROUP, 5, 3, 8192, 3);
    u_op(b, UNIMEMF_PROGRESS, 3);
    rc |= put(dir, "fragments", b);

    /* four senders' fragments interleaved (the lanes dealt in turn), mailbox budget 1 */
    b.assign(1, UNIMEMF_CFG(2, 1, 0, 0));
    for (uint8_t lane = 0; lane < UNIMEMF_LANES; ++lane) {
        u_pack(b, (uint8_t)(lane << 2), lane, lane, (uint16_t)(200 + 150 * lane), lane);
    }
    u_op(b, UNIMEMF_DEAL);
    u_pack(b, 0, 7, 0, 1000, 9);                    /* the same sender twice in one lane... */
    u_pack(b, 0, 8, 0, 500, 10);
    u_pack(b, 1 << 2, 9, 1, 999, 11);
    u_op(b, UNIMEMF_DEAL);
    rc |= put(dir, "interleaved", b);

    /* raw FIRST/CONT of two senders interleaved by hand, sender 1 straight to the decoder */
    b.assign(1, UNIMEMF_CFG(1, 1, 2, 1));
    u_msg(b, raw, UNIMEM_PROTO_FIRST, 2, 0, 0, 80, 0x10);
    u_msg(b, raw, UNIMEM_PROTO_FIRST, 3, 0, 1, 52, 0x20);
    u_msg(b, raw, UNIMEM_PROTO_CONT, 2, 1, 0, 0, 0x11);
    u_msg(b, raw, UNIMEM_PROTO_CONT, 3, 1, 1, 0, 0x21);     /* sender 1 complete */
    u_msg(b, raw, UNIMEM_PROTO_CONT, 2, 2, 0, 0, 0x12);     /* sender 0 complete */
    rc |= put(dir, "raw_fragments", b);

    /* the unit test's corrupt cases, receiver of 4 senders and 100 bytes */
    b.assign(1, UNIMEMF_CFG(1, 1, 1, 0));
    u_msg(b, raw, 0, 0, 0, 0, 0, 0);                          /* type 0: zeroed memory */
    u_msg(b, raw, 5, 0, 0, 0, 0, 0);                          /* unknown type */
    u_msg(b, raw, UNIMEM_PROTO_SHORT, 0, 31, 0, 0, 1);        /* SHORT longer than 30 */
    u_msg(b, raw, UNIMEM_PROTO_CONT, 2, 1, 1, 0, 2);          /* CONT without FIRST */
    u_msg(b, raw, UNIMEM_PROTO_FIRST, 2, 0, 1, 100, 3);
    u_msg(b, raw, UNIMEM_PROTO_CONT, 2, 2, 1, 0, 3);          /* out of sequence */
    u_msg(b, raw, UNIMEM_PROTO_FIRST, 2, 0, 1, 101, 4);       /* beyond the limit */
    u_msg(b, raw, UNIMEM_PROTO_FIRST, 2, 0, 4, 50, 5);        /* sender beyond the table */
    u_msg(b, raw, UNIMEM_PROTO_FIRST, 2, 0, 0xffff, 50, 5);
    u_msg(b, raw, UNIMEM_PROTO_FIRST, 2, 0, 1, 60, 6);
    u_msg(b, raw, UNIMEM_PROTO_CONT, 7, 1, 1, 0, 6);          /* another AM id mid-message */
    u_msg(b, raw, UNIMEM_PROTO_FIRST, 2, 0, 2, 60, 7);
    u_msg(b, raw, UNIMEM_PROTO_FIRST, 2, 0, 2, 60, 8);        /* FIRST while one is in progress */
    u_msg(b, raw, UNIMEM_PROTO_CONT, 2, 1, 2, 0, 8);
    u_msg(b, raw, UNIMEM_PROTO_CONT, 2, 2, 2, 0, 8);
    u_msg(b, raw, UNIMEM_PROTO_FIRST, 2, 0, 3, 0, 9);         /* total length 0 */
    u_msg(b, raw, UNIMEM_PROTO_FIRST, 2, 1, 3, 40, 9);        /* FIRST with a sequence number */
    u_msg(b, raw, UNIMEM_PROTO_FIRST, 2, 0, 3, 10, 9);        /* a FIRST alone: total <= 24 */
    rc |= put(dir, "corrupt", b);

    /* a full mailbox: 64 slots, one message per progress call, groups of 32 */
    b.assign(1, UNIMEMF_CFG(0, 0, 0, 0));
    for (int i = 0; i < 100; ++i) {
        u_msg(b, (i % 32 == 31) ? raw : grp, UNIMEM_PROTO_SHORT, (uint8_t)i, (uint8_t)(i % 31), 0,
              0, (uint8_t)i);
    }
    u_pack(b, UNIMEMF_GROUP, 1, 0, 64, 1);
    rc |= put(dir, "mailbox_full", b);

    /* landing slots: LANDs and LANDIs into stored slots, interleaved with fragments; a LAND
     * whose slot was never stored, one to a slot or sender beyond the area, one too long */
    b.assign(1, (uint8_t)(UNIMEMF_CFG(2, 1, 1, 0) | UNIMEMF_CFG_LAND));
    u_land(b, UNIMEM_PROTO_LAND, 1, 0, 0, 500, 3);
    u_pack(b, 0, 2, 0, 300, 4);
    u_land(b, UNIMEM_PROTO_LANDI, 3, 0, 1, 72, 5);
    u_land(b, UNIMEM_PROTO_LAND, 4, 3, 2, 1000, 6);
    u_op(b, UNIMEMF_DEAL);
    u_op(b, UNIMEMF_PROGRESS, 3);
    u_land_bad(b, UNIMEM_PROTO_LAND, 1, 1, 0, 10, 0);         /* never stored */
    u_land_bad(b, UNIMEM_PROTO_LAND, 1, 4, 0, 10, UNIMEMF_STORE);   /* sender beyond */
    u_land_bad(b, UNIMEM_PROTO_LAND, 1, 0, 3, 10, UNIMEMF_STORE);   /* slot beyond */
    u_land_bad(b, UNIMEM_PROTO_LANDI, 1, 0, 0, 81, UNIMEMF_STORE);  /* LANDI too long */
    u_land_bad(b, UNIMEM_PROTO_LAND, 1, 0, 0, 1001, UNIMEMF_STORE); /* beyond SEG_SIZE */
    u_op(b, UNIMEMF_PROGRESS, 3);
    rc |= put(dir, "landing", b);
    return rc;
}

/* rdmach's served requests (rdmach_serve_fuzz.cc reads an op byte, then the step's bytes):
 * aimed atomics and puts/gets at each registration's edges, and raw records of both kinds. */
static int gen_rdmach_serve(const std::string &dir)
{
    Bytes b;
    int rc = 0;

    /* aimed: op, region, how, delta (2 bytes), then the op's own bytes */
    for (uint8_t region = 0; region < 3; ++region) {
        for (uint8_t how = 0; how < 6; ++how) {
            Bytes amo = {0, region, how, 0, 0};
            amo.resize(amo.size() + 16 + 5, (uint8_t)(how + 1));
            b.insert(b.end(), amo.begin(), amo.end());
            Bytes rma = {1, region, (uint8_t)(how | 0x80), 1, 0, 64, 1, 2, 1};
            b.insert(b.end(), rma.begin(), rma.end());
        }
    }
    rc |= put(dir, "aimed", b);
    /* raw records of the right size, all bytes one value, and of a wrong size */
    b.clear();
    for (uint8_t v : {0x00, 0x01, 0xff}) {
        b.push_back(2);
        b.insert(b.end(), 80, v);
        b.push_back(1);
        b.push_back(3);
        b.insert(b.end(), 72, v);
        b.push_back(0);
        b.push_back(71);
    }
    rc |= put(dir, "raw", b);
    return rc;
}

static int in_dir(const std::string &dir, const char *sub, int (*gen)(const std::string &))
{
    std::string d = dir + "/" + sub;
    if ((mkdir(d.c_str(), 0755) != 0) && (errno != EEXIST)) {
        perror(d.c_str());
        return 1;
    }
    return gen(d);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen_corpus <dir>\n");
        return 2;
    }
    std::string dir = argv[1];
    int rc = 0;
    rc |= in_dir(dir, "udz", gen_udz);
    rc |= in_dir(dir, "rdmach", gen_rdmach);
    rc |= in_dir(dir, "rdmach_serve", gen_rdmach_serve);
    rc |= in_dir(dir, "unimem", gen_unimem);
    return rc;
}
