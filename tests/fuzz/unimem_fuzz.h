/*
 * Shared by the unimem mailbox fuzzer (unimem_fuzz.cc) and its seed generator (gen_corpus.cc):
 * the fuzzer input format.
 *
 * Input: [cfg:1], then records, each [ctl:1][32 bytes]; a short last record is padded with
 * zeros.
 *   cfg bits 0-1: the receiver's largest message (SEG_SIZE): UNIMEMF_MAX_LENS
 *   cfg bits 2-3: its sender table (MAX_SENDERS): UNIMEMF_SENDERS
 *   cfg bits 4-5: mailbox messages per progress call (RX_BUDGET): UNIMEMF_BUDGETS
 *   cfg bit 6:    straight to the decoder (the receiver's private copy of each message) instead
 *                 of through the emulated mailbox (unimem_hal_emu.c)
 *   cfg bit 7:    the receiver exports a landing area (LAND, LANDI): UNIMEMF_LAND_RINGS rings
 *                 (at most its senders) of UNIMEMF_LAND_SLOTS slots, sized exactly
 *   ctl bits 0-1: what (UNIMEMF_*, below)
 *   ctl bits 2-3: the lane of UNIMEMF_PACK
 *   ctl bit 4:    UNIMEMF_RAW: the message joins a packetizer group, sent all or nothing at the
 *                 first record that does not join it (this message included if it is a RAW
 *                 without the bit), or at 32 messages; UNIMEMF_PACK: the fragments go out at
 *                 once as one group, as the glue's am_bcopy sends them
 *   ctl bit 5:    UNIMEMF_RAW with a landing area: before it goes, the sender's store into the
 *                 slot the message names (if that slot exists): a payload of pattern [31] and
 *                 the busy word, as a sender does before its LAND
 *
 * UNIMEMF_RAW       the 32 bytes are one mailbox message, as they are
 * UNIMEMF_PACK      the 32 bytes describe a message the fuzzer encodes (unimem_proto_pack):
 *                   [0] AM id, [1..2] sender id, [3..4] length % (largest + 1), [5] pattern;
 *                   its fragments are queued on the lane (or sent at once: ctl bit 4)
 * UNIMEMF_DEAL      one fragment from each lane in turn until all are empty: the senders'
 *                   fragments interleaved, as the mailbox mixes senders
 * UNIMEMF_PROGRESS  [0] % 4 + 1 progress calls of the receiver
 * Multi-byte fields are little endian.
 */
#ifndef UNIMEM_FUZZ_H
#define UNIMEM_FUZZ_H

#include <stdint.h>

#define UNIMEMF_RAW      0
#define UNIMEMF_PACK     1
#define UNIMEMF_DEAL     2
#define UNIMEMF_PROGRESS 3
#define UNIMEMF_GROUP    0x10
#define UNIMEMF_STORE    0x20
#define UNIMEMF_LAND_RINGS 4
#define UNIMEMF_LAND_SLOTS 3
#define UNIMEMF_LANES    4
#define UNIMEMF_REC      33          /* ctl + one message */

#define UNIMEMF_MAX_LENS {64, 100, 1000, 8192}
#define UNIMEMF_SENDERS  {1, 4, 64, 1024}
#define UNIMEMF_BUDGETS  {1, 4, 16, 64}

#define UNIMEMF_CTL(_what, _lane, _group) ((uint8_t)((_what) | ((_lane) << 2) | (_group)))
#define UNIMEMF_CFG(_len_sel, _senders_sel, _budget_sel, _direct) \
    ((uint8_t)((_len_sel) | ((_senders_sel) << 2) | ((_budget_sel) << 4) | ((_direct) << 6)))
#define UNIMEMF_CFG_LAND 0x80

#endif
