/*
 * libFuzzer target for the ud_zcopy datagram decoders (uct/ud_zcopy/udz_core.c, udz_zrx.c):
 * rx_ctrl on the control channel (AM, PUT, ZREQ, ACK, ZACK, ZDONE, ZERR, CHAL) and
 * udz_zrx_poll on a data channel with a get in flight (ZDATA scattered straight into the
 * destination buffer).
 *
 * The scene, rebuilt for every input: core A on the in-memory wire (tests/unit/udz_memwire.h),
 * a peer P (an address and a cookie, no core: the fuzzer speaks for it) to which A has sent
 * three AMs (unacked, so ACKs and NAKs have something to act on) and from which A gets two
 * regions (channels 1 and 2 busy, buffers of exactly the get's size so that ASan sees any
 * write past them), and a registered region of A that ZREQ and PUT may name. The input is split
 * into datagrams (udz_fuzz.h) that arrive on the channels, with simulated time passing in
 * between; then time runs on past the peer timeout so every timer path runs too. Built with
 * -fsanitize=fuzzer,address,undefined: an out-of-bounds access, a double completion or UB aborts.
 */
#include "udz_memwire.h"
#include "udz_core.h"
#include "udz_fuzz.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

using udzmem::MemNet;

namespace {

struct Scene {
    uint8_t *region;                    /* NULL once deregistered (freed) */
    std::set<udz_mem_hold_t*> holds;    /* transfers served from it, as the md links them */
    std::set<void*> done;
    uint64_t now;
    uint64_t sink;
};

void f_am(void *u, udz_peer_t *, uint8_t, void *data, size_t len)
{
    Scene *s = (Scene*)u;
    const uint8_t *d = (const uint8_t*)data;
    for (size_t i = 0; i < len; ++i) {
        s->sink += d[i];    /* every delivered byte must be readable */
    }
}

void *f_mem(void *u, uint64_t addr, uint64_t len, const uint8_t *rkey, int)
{
    Scene *s = (Scene*)u;
    if (s->region == nullptr) {
        return nullptr;     /* deregistered */
    }
    for (int i = 0; i < UDZ_RKEY_LEN; ++i) {
        if (rkey[i] != UDZF_RKEY_BYTE) {
            return nullptr;
        }
    }
    if ((addr < UDZF_REGION_ADDR) || (len > UDZF_REGION_LEN) ||
        (addr - UDZF_REGION_ADDR > UDZF_REGION_LEN - len)) {
        return nullptr;
    }
    return s->region + (addr - UDZF_REGION_ADDR);
}

void *f_mem_hold(void *u, uint64_t addr, uint64_t len, const uint8_t *rkey,
                 udz_mem_hold_t *hold)
{
    void *p = f_mem(u, addr, len, rkey, 0);
    if (p != nullptr) {
        hold->revoked = 0;
        hold->busy    = 0;
        ((Scene*)u)->holds.insert(hold);
    }
    return p;
}

void f_mem_unhold(void *u, udz_mem_hold_t *hold) { ((Scene*)u)->holds.erase(hold); }

/* As the md's deregistration: revoke what is served from the region, then free it. */
void f_dereg(Scene *s)
{
    if (s->region == nullptr) {
        return;
    }
    for (udz_mem_hold_t *h : s->holds) {
        if (h->busy) {
            __builtin_trap();   /* one thread: never inside a send */
        }
        h->revoked = 1;
    }
    s->holds.clear();
    free(s->region);
    s->region = nullptr;
}

void complete_once(Scene *s, void *ctx)
{
    if (!s->done.insert(ctx).second) {
        __builtin_trap();   /* completed twice */
    }
}

void f_get_done(void *u, void *ctx, int) { complete_once((Scene*)u, ctx); }
void f_send_done(void *u, void *ctx, int) { complete_once((Scene*)u, ctx); }
void f_peer_failed(void *, udz_peer_t *) {}
void f_resources(void *) {}
uint64_t f_now(void *u) { return ((Scene*)u)->now; }

const udz_user_ops_t ops = {f_am, f_mem, f_get_done, f_send_done, f_peer_failed, f_resources,
                            f_now, f_mem_hold, f_mem_unhold};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    udz_config_t c;
    memset(&c, 0, sizeof(c));
    c.seg_size        = 512;
    c.chunk_size      = UDZF_CHUNK;
    c.tx_window       = 8;
    c.tx_pool         = 16;
    c.ack_every       = 2;
    c.ack_delay_ns    = 20000;
    c.rto_ns          = 200000;
    c.rto_max_ns      = 1600000;
    c.peer_timeout_ns = 20000000;
    c.channels        = 2;
    c.zc_window       = 1200;
    c.zc_max          = UDZF_GET2_LEN;
    c.rx_batch        = 4;
    c.rx_reorder      = 8;         /* packets after a hole kept: the ring, its walk */
    c.max_peers       = 4;

    MemNet net(0x1234, 64);
    udzmem::Endpoint *ea = net.add();
    net.add();      /* P */
    net.add();      /* Q */
    Scene s;
    s.region = (uint8_t*)calloc(1, UDZF_REGION_LEN);
    s.now = 1000000000ull;
    s.sink = 0;
    udz_counters_t cnt;
    memset(&cnt, 0, sizeof(cnt));
    int err = 0;
    udz_core_t *core = udz_core_create(&c, MemNet::ops(), ea, &ops, &s, UDZF_COOKIE_A, &cnt, &err);
    if (core == nullptr) {
        abort();
    }
    udz_core_set_time(core, s.now);

    udz_addr_t pa = MemNet::addr(1), qa = MemNet::addr(2);
    udz_chans_t pch = MemNet::chans(2);     /* P's address announces 2 data channels */
    udz_peer_t *p = udz_peer_get(core, &pa, UDZF_COOKIE_P, &pch);
    {
        /* P echoes A's address challenge (udz_peer.c), so that ZREQs from the input are
         * served and the owner's paths are fuzzed too; inputs may send CHALs of their own */
        udz_chal_t e = {0, 0};
        for (auto &d : net.ep(1)->chan[0].q) {
            if ((d.data.size() == UDZ_HDR_LEN + sizeof(udz_chal_t)) && (d.data[3] == UDZ_T_CHAL)) {
                memcpy(&e.echo, d.data.data() + UDZ_HDR_LEN + 8, 8);
            }
        }
        udz_hdr_t h;
        memset(&h, 0, sizeof(h));
        h.magic = UDZ_MAGIC; h.version = UDZ_VERSION; h.type = UDZ_T_CHAL;
        h.len = sizeof(e); h.dst_cookie = UDZF_COOKIE_A; h.src_cookie = UDZF_COOKIE_P; h.ack = 1;
        uint8_t dg[sizeof(h) + sizeof(e)];
        memcpy(dg, &h, sizeof(h));
        memcpy(dg + sizeof(h), &e, sizeof(e));
        net.inject(0, 0, dg, sizeof(dg), pa);
        udz_core_progress(core, s.now);
    }
    for (int i = 0; i < 3; ++i) {
        void *pl = udz_send_begin(core, p, &err);
        if (pl == nullptr) {
            abort();
        }
        memset(pl, i, 16);
        udz_send_commit(core, UDZ_T_AM, (uint8_t)i, 16);
    }
    uint8_t key[UDZ_RKEY_LEN];
    memset(key, 0x33, sizeof(key));
    uint8_t *g1 = (uint8_t*)malloc(UDZF_GET1_LEN), *g2 = (uint8_t*)malloc(UDZF_GET2_LEN);
    if ((udz_get(core, p, g1, UDZF_GET1_LEN, 0x1000, key, g1) != 0) ||
        (udz_get(core, p, g2, UDZF_GET2_LEN, 0x2000, key, g2) != 0)) {
        abort();
    }
    net.clear(1);

    size_t off = 0;
    while (off < size) {
        uint8_t ctl = data[off++];
        size_t len = 0;
        if (off + 2 <= size) {
            len = (size_t)data[off] | ((size_t)data[off + 1] << 8);
            off += 2;
        }
        if (len > size - off) {
            len = size - off;
        }
        uint8_t buf[65536];
        memcpy(buf, data + off, len);
        off += len;
        if (ctl & UDZF_CTL_EVENT) {
            if (UDZF_CTL_TARGET(ctl) == 1) {
                f_dereg(&s);
            } else {
                net.inject_unreach(0, UDZF_CTL_TARGET(ctl) == 0 ? pa : qa);
            }
            s.now += (uint64_t)UDZF_CTL_DT(ctl) * 100000;
            udz_core_progress(core, s.now);
            net.clear(1);
            net.clear(2);
            continue;
        }
        if ((ctl & UDZF_CTL_FIXUP) && (len >= 24)) {
            uint64_t a = UDZF_COOKIE_A, pc = UDZF_COOKIE_P;
            memcpy(buf + 8, &a, 8);
            memcpy(buf + 16, &pc, 8);
        }
        int target = UDZF_CTL_TARGET(ctl);
        /* an exact-size heap copy: ASan sees any read past the datagram's end in the wire's
         * scatter (the core only ever sees what the wire copied into its own buffers) */
        net.inject(0, target == 3 ? 0 : (uint32_t)target, buf, len, target == 3 ? qa : pa);
        s.now += (uint64_t)UDZF_CTL_DT(ctl) * 100000;
        udz_core_progress(core, s.now);
        net.clear(1);
        net.clear(2);
    }
    /* let every timer fire: retransmissions, STUCK zacks, peer timeout */
    for (int i = 0; i < 40; ++i) {
        s.now += 1000000;
        udz_core_progress(core, s.now);
        net.clear(1);
        net.clear(2);
    }
    static const int verbose = getenv("UDZ_FUZZ_VERBOSE") != nullptr;
    if (verbose) {  /* what an input reached, e.g. to check that the seeds go deep */
#define UDZF_PRINT(_n) if (cnt._n) fprintf(stderr, " %s=%llu", #_n, (unsigned long long)cnt._n);
        fprintf(stderr, "udz_fuzz: %zu bytes, done %zu:", size, s.done.size());
        UDZ_CORE_COUNTERS(UDZF_PRINT)
        fprintf(stderr, "\n");
#undef UDZF_PRINT
    }
    (void)udz_flush_done(core, p, &s.sink, 1);
    (void)udz_core_idle(core);
    udz_core_destroy(core);
    if (!s.holds.empty()) {
        __builtin_trap();   /* a transfer kept its registration past the core */
    }
    free(g1);
    free(g2);
    free(s.region);
    return 0;
}
