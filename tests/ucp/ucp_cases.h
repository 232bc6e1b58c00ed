/* ucp_ops cases; each runs in both processes of a pair and returns 1 if its side passed. */
#ifndef TESTS_UCP_CASES_H
#define TESTS_UCP_CASES_H

#include "ucp_pair.h"

/* tag: every size sent twice, to a posted (expected) and to a late (unexpected) receive */
int up_tag_case(up_t *u, const size_t *sizes, size_t n);
/* stream: several messages in flight, received with WAITALL, in order */
int up_stream_case(up_t *u);
/* rma: put (+ ep flush) and get with the target's rkey, small to 4 MiB */
int up_rma_case(up_t *u);
/* Small puts and gets while the target makes no progress. */
int up_rma_quiet_case(up_t *u);
/* amo: add/fadd/swap/cswap, 32 and 64 bit, and 100 concurrent adds */
int up_amo_case(up_t *u);
/* am: UCP active messages with a user header, short to rendezvous (ucp_am_case.c) */
int up_am_case(up_t *u);
/* Memory for atomics on a peer that is about to die: the target exposes a malloc'd region
 * (kept: it will be killed), the initiator gets its address and key. 0 on success. */
int up_amo_region(up_t *u, uint64_t *raddr, ucp_rkey_h *rkey);

#endif
