/*
 * Shared by the ud_zcopy decoder fuzzer (udz_fuzz.cc) and its seed generator (gen_corpus.cc):
 * the fuzzer input format and the fixed identities of the scene.
 *
 * Input: records, each [ctl:1][len:2, little endian][len bytes: one datagram].
 *   ctl bits 0-1: where it arrives: 0 control channel from peer P, 1 data channel 1 (a get from P
 *                 in flight), 2 data channel 2 (another get from P), 3 control channel from an
 *                 unknown address Q
 *   ctl bit 2:    fix up the cookies (dst = the core's, src = P's) so that the decoder goes deep
 *   ctl bit 3:    not a datagram but an event (the record's bytes are skipped): with bits 0-1
 *                 0 the wire reports P unreachable (ICMP: the core probes P), 1 the region
 *                 is deregistered (the transfers served from it are revoked; its memory is
 *                 freed, so ASan sees any later read), 2 or 3 a report about Q
 *   ctl bits 4-7: simulated time that passes before the datagram arrives (n * 100 us)
 * A short last record takes what is left.
 */
#ifndef UDZ_FUZZ_H
#define UDZ_FUZZ_H

#include <stdint.h>

#define UDZF_COOKIE_A   0x4141414141414141ull   /* the core under test */
#define UDZF_COOKIE_P   0x5050505050505050ull   /* its peer */
#define UDZF_RKEY_BYTE  0x52                    /* the rkey of A's registered region */
#define UDZF_CHUNK      300
#define UDZF_GET1_LEN   1000                    /* 300, 300, 300, 100: xfer_id 1, channel 1 */
#define UDZF_GET2_LEN   8192                    /* xfer_id 2, channel 2 */
#define UDZF_REGION_LEN 4096
#define UDZF_REGION_ADDR 0x10000000ull       /* its address as peers name it */

#define UDZF_CTL_TARGET(_c) ((_c) & 3)
#define UDZF_CTL_FIXUP      0x04
#define UDZF_CTL_EVENT      0x08
#define UDZF_CTL_DT(_c)     ((_c) >> 4)

#endif
