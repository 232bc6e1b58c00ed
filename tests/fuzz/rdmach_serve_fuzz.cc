/*
 * libFuzzer target for rdmach's served requests (uct/rdmach/rdmach_serve.[ch]): the records
 * a peer writes into a target's ring to have the target's progress run an atomic, or a small
 * put or get, on the target's memory, and the reply slot it writes back.
 *
 * The scene: the target's registrations are three real allocations of exactly their size
 * (ASan sees any access past one). Each step of the input builds an atomic or a put/get
 * record, either from raw bytes or aimed near a registration (an offset and length around
 * its edges, the registration named right or wrong), and hands it to the decoder as the
 * glue does; a record the core lets through is then carried out the way the glue carries it
 * out (the CPU atomic on the word, the copy between the word and a reply slot of
 * RDMACH_SERVE_RMA_MAX bytes). Checked, besides the sanitizers:
 *   - DO only inside a registration the target has, computed here in 128 bits;
 *   - the reply slot and its last byte inside the reply segment;
 *   - a record of another length is dropped.
 */
#include "rdmach_serve.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

struct Region {
    uint8_t *mem;
    uint64_t len;
};

const uint64_t kLens[3] = {8, 4096, 3 * 4096 + 24};
Region g_regions[3];
uint64_t g_slot[RDMACH_SERVE_SLOT_WORDS];

void setup()
{
    static bool done;

    if (done) {
        return;
    }
    for (int i = 0; i < 3; ++i) {
        g_regions[i].len = kLens[i];
        g_regions[i].mem = static_cast<uint8_t*>(aligned_alloc(8, kLens[i]));
        memset(g_regions[i].mem, 0, kLens[i]);
    }
    done = true;
}

int registered(void *, uint64_t address, uint64_t length)
{
    for (const Region &r : g_regions) {
        if ((address == (uintptr_t)r.mem) && (length == r.len)) {
            return 1;
        }
    }
    return 0;
}

/* The independent check: some registration holds [address, address + length). */
bool held(uint64_t address, uint64_t length)
{
    for (const Region &r : g_regions) {
        unsigned __int128 end = (unsigned __int128)address + length;
        if ((address >= (uintptr_t)r.mem) && (end <= (unsigned __int128)(uintptr_t)r.mem + r.len)) {
            return true;
        }
    }
    return false;
}

void check_slot(uint32_t slot, uint32_t bytes)
{
    if ((slot >= RDMACH_SERVE_POOL) ||
        (rdmach_serve_reply_offset(slot, 2) + bytes > RDMACH_SERVE_REPLY_BYTES)) {
        fprintf(stderr, "rdmach_serve_fuzz: reply slot %u (+%u bytes) outside the segment\n",
                slot, bytes);
        abort();
    }
}

struct Input {
    const uint8_t *p;
    size_t n;

    bool take(void *out, size_t len)
    {
        if (n < len) {
            memset(out, 0, len);
            n = 0;
            return false;
        }
        memcpy(out, p, len);
        p += len;
        n -= len;
        return true;
    }
    uint8_t byte() { uint8_t b = 0; take(&b, 1); return b; }
    uint64_t u64() { uint64_t v = 0; take(&v, 8); return v; }
};

/* Aims a record's address, length and named registration near one of ours (edges, wraps,
 * the wrong registration) from a few input bytes. */
void aim(Input &in, uint64_t *address, uint64_t *length, rdmach_serve_reg_t *reg)
{
    const Region &r = g_regions[in.byte() % 3];
    uint8_t how     = in.byte();
    int64_t delta   = (int8_t)in.byte() * 8 + (int8_t)in.byte() % 8;

    reg->address = (uintptr_t)r.mem;
    reg->length  = r.len;
    switch (how % 6) {
    case 0: *address = (uintptr_t)r.mem + delta; break;
    case 1: *address = (uintptr_t)r.mem + r.len + delta; break;
    case 2: *address = UINT64_MAX - (uint64_t)(delta & 0xff); break;
    case 3: *address = (uintptr_t)r.mem + delta; reg->length += (uint64_t)(delta & 0xfff); break;
    case 4: *address = (uintptr_t)r.mem + delta; reg->length = UINT64_MAX - reg->address + 1 +
                                                               (how >> 3); break;
    default: *address = (uintptr_t)r.mem + delta; reg->address -= 8; break;
    }
    if (length != nullptr) {
        *length = (how & 0x80) ? in.byte() : (in.u64() % (RDMACH_SERVE_RMA_MAX + 2));
    }
}

void one_amo(Input &in, bool raw)
{
    rdmach_serve_amo_rec_t rec, out;
    uint32_t length = sizeof(rec);

    if (raw) {
        in.take(&rec, sizeof(rec));
        length = (in.byte() & 0x0f) ? sizeof(rec) : in.byte();
    } else {
        memset(&rec, 0, sizeof(rec));
        aim(in, &rec.address, nullptr, &rec.reg);
        rec.value        = in.u64();
        rec.compare      = in.u64();
        rec.token        = 1 + in.byte();
        rec.replies.fd   = 3;
        rec.replies.ino  = 77;
        rec.replies.base = 0x10000;
        rec.slot         = in.byte() % (RDMACH_SERVE_POOL + 2);
        rec.op           = in.byte() % 7;
        rec.bits         = (in.byte() & 1) ? 32 : 64;
    }
    rdmach_serve_verdict_t v = rdmach_serve_amo_decode(&rec, length, registered, nullptr, &out);
    if ((length != sizeof(rec)) && (v != RDMACH_SERVE_DROP)) {
        fprintf(stderr, "rdmach_serve_fuzz: a %u-byte atomic record was not dropped\n", length);
        abort();
    }
    if (v == RDMACH_SERVE_DROP) {
        return;
    }
    check_slot(out.slot, 0);
    if (v == RDMACH_SERVE_DO) {
        if (!held(out.address, out.bits / 8) || (out.address % (out.bits / 8))) {
            fprintf(stderr, "rdmach_serve_fuzz: atomic at 0x%llx served outside the registrations\n",
                    (unsigned long long)out.address);
            abort();
        }
        rdmach_serve_amo_apply((void*)(uintptr_t)out.address, out.op, out.bits, out.value,
                               out.compare);
    }
}

void one_rma(Input &in, bool raw)
{
    rdmach_serve_rma_rec_t rec, out;
    uint32_t length = sizeof(rec);
    uint64_t len64  = 0;

    if (raw) {
        in.take(&rec, sizeof(rec));
        length = (in.byte() & 0x0f) ? sizeof(rec) : in.byte();
    } else {
        memset(&rec, 0, sizeof(rec));
        aim(in, &rec.address, &len64, &rec.reg);
        rec.length       = (uint32_t)len64;
        rec.token        = 1 + in.byte();
        rec.replies.fd   = 3;
        rec.replies.ino  = 77;
        rec.replies.base = 0x10000;
        rec.slot         = in.byte() % (RDMACH_SERVE_POOL + 2);
        rec.write        = in.byte() % 3;
    }
    rdmach_serve_verdict_t v = rdmach_serve_rma_decode(&rec, length, &out);
    if ((length != sizeof(rec)) && (v != RDMACH_SERVE_DROP)) {
        fprintf(stderr, "rdmach_serve_fuzz: a %u-byte put/get record was not dropped\n", length);
        abort();
    }
    if (v == RDMACH_SERVE_DROP) {
        return;
    }
    check_slot(out.slot, out.length);
    if (rdmach_serve_rma_allowed(&out, registered, nullptr) != RDMACH_SERVE_DO) {
        return;
    }
    if (!held(out.address, out.length)) {
        fprintf(stderr, "rdmach_serve_fuzz: %u bytes at 0x%llx served outside the registrations\n",
                out.length, (unsigned long long)out.address);
        abort();
    }
    if (out.write) {
        memcpy((void*)(uintptr_t)out.address, &g_slot[2], out.length);
    } else {
        memcpy(&g_slot[2], (const void*)(uintptr_t)out.address, out.length);
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Input in = {data, size};

    setup();
    while (in.n > 0) {
        uint8_t op = in.byte();
        switch (op % 4) {
        case 0: one_amo(in, false); break;
        case 1: one_rma(in, false); break;
        case 2: one_amo(in, true); break;
        default: one_rma(in, true); break;
        }
    }
    return 0;
}
