/*
 * Writes the seed corpus of the ud_zcopy decoder fuzzer (one valid datagram of every type, in
 * the scene udz_fuzz.cc builds, plus a few sequences): gen_corpus <dir>. The files are checked in
 * under tests/fuzz/corpus; rerun this after a wire format change.
 */
#include "udz_proto.h"
#include "udz_fuzz.h"

#include <cstdio>
#include <cstring>
#include <string>
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

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen_corpus <dir>\n");
        return 2;
    }
    std::string dir = argv[1];
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
    return rc;
}
