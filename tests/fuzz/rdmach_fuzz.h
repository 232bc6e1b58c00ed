/*
 * Shared by the rdmach ring-record fuzzer (rdmach_fuzz.cc) and its seed generator
 * (gen_corpus.cc): the fuzzer input format and the fixed shape of the scene.
 *
 * Input: [cfg:1], then operations, each [op:1][its arguments]; a short last operation reads
 * the missing bytes as 0.
 *   cfg bits 0-1: the ring geometry (RDMACHF_GEOM_*, below)
 *   cfg bit 2:    poll every ring on every call (UCX_RDMACH_POLL_ALL) instead of the hot list,
 *                 doorbells and sweeps
 *   cfg bits 3-4: the hot list's cap (HOT_MAX) - 1
 *   cfg bits 5-6: records per ring per progress call (RX_BUDGET): 1, 2, 4, 16
 *   op bits 0-2:  the ring (modulo RDMACHF_RINGS)
 *   op bits 3-5:  what (RDMACHF_OP_*)
 *   op bits 6-7:  n, a small count some operations take
 *
 * Rings 0, 2 and 4 are mapped, as on shared memory (the sender stores into the ring, the
 * receiver stores its credit into the sender's tail copy); rings 1 and 3 are posted, as on the
 * InfiniBand RC wire (records built in a shadow and copied over by the wire's post_record,
 * credit and rx_hot posted back); ring 1 also gates the receiver on completions counted in
 * (rx->avail, RC with a shared receive queue). Ring 4's sender has claimed it but not yet
 * described itself (owner 0) until an RDMACHF_OP_CTL sets its owner.
 */
#ifndef RDMACH_FUZZ_H
#define RDMACH_FUZZ_H

#include <stdint.h>

#define RDMACHF_RINGS       5    /* max_rings: not a multiple of 8, the doorbell words are padded */
#define RDMACHF_SWEEP       4    /* progress calls between sweeps of cold rings */
#define RDMACHF_IDLE        3    /* empty polls before a hot ring is demoted */
#define RDMACHF_PIPE_CHUNKS 8    /* RDMACHF_OP_PIPE: up to this many chunks per message */
#define RDMACHF_LARGE       4    /* ring 2 has this many times the slots (a large ring) */

/* [slot size, slots, chunk (largest payload), lazy tail in 1/8 of the ring] */
#define RDMACHF_GEOMS \
    {{64, 16, 100, 2}, {64, 64, 1000, 2}, {128, 32, 1000, 4}, {256, 8, 200, 4}}

/* RDMACHF_OP_SEND    [len:2][am_id:1]   the honest sender sends one record of len % (chunk + 1)
 *                                       payload bytes (a pattern); on a posted ring with n odd,
 *                                       when the receiver next demotes the ring (the race of a
 *                                       sender that still saw rx_hot == 1), else at the end
 * RDMACHF_OP_PIPE    [len:2]            a message of len % (RDMACHF_PIPE_CHUNKS * chunk + 1)
 *                                       bytes in chunk-size records back to back, the receiver
 *                                       polled whenever the ring is full (UCP's pipelined
 *                                       eager protocol)
 * RDMACHF_OP_FORGE   [length:4][nslots:2][type:1][am_id:1]
 *                                       a record header at the receiver's next position; its
 *                                       mark by n: 0 position + 1 (taken), 1 a lap ahead,
 *                                       2 a lap behind, 3 zero
 * RDMACHF_OP_RAW     [slot:1][off:1][len:1][len bytes]
 *                                       bytes stored into the ring at slot % slots, offset
 *                                       off % slot size, cut at the ring's end
 * RDMACHF_OP_CTL     [what:1][value:8]  a word the peer writes, by what % 5: 0 the ring's owner,
 *                                       1 the claim counter, 2 the ring's doorbell byte, 3 the
 *                                       credit it returned into our sender's tail copy,
 *                                       4 completions counted in (ring 1: avail += value & 0xff)
 * RDMACHF_OP_POLL                       n + 1 progress calls of the poller, as the glue's
 * RDMACHF_OP_POLL1                      one record of the ring (rdmach_rx_poll, budget 1),
 *                                       checked against the header rules
 * RDMACHF_OP_SYNC                       the sender goes on from the receiver's position (after
 *                                       forged records)
 * All multi-byte arguments are little endian. */
#define RDMACHF_OP_SEND  0
#define RDMACHF_OP_PIPE  1
#define RDMACHF_OP_FORGE 2
#define RDMACHF_OP_RAW   3
#define RDMACHF_OP_CTL   4
#define RDMACHF_OP_POLL  5
#define RDMACHF_OP_POLL1 6
#define RDMACHF_OP_SYNC  7

#define RDMACHF_CTL_OWNER    0
#define RDMACHF_CTL_CLAIM    1
#define RDMACHF_CTL_DOORBELL 2
#define RDMACHF_CTL_TAIL     3
#define RDMACHF_CTL_AVAIL    4

#define RDMACHF_OPB(_what, _ring, _n) ((uint8_t)(((_n) << 6) | ((_what) << 3) | (_ring)))
#define RDMACHF_CFG(_geom, _poll_all, _hot_max, _budget_sel) \
    ((uint8_t)((_geom) | ((_poll_all) << 2) | (((_hot_max) - 1) << 3) | ((_budget_sel) << 5)))

#endif
