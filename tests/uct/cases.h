/* The uct_pair cases. Each runs in both processes of a pair (t->pair->role tells which side) on a
 * freshly opened and connected ut_t, and returns PAIR_PASS, PAIR_FAIL or PAIR_SKIP. */
#ifndef TESTS_UCT_CASES_H
#define TESTS_UCT_CASES_H

#include "uct_ctx.h"

typedef int (*ut_case_fn_t)(ut_t *t);

/* active messages: every size class boundary of am_short/bcopy/zcopy, checked byte by byte */
int case_am_short(ut_t *t);
int case_am_bcopy(ut_t *t);
int case_am_zcopy(ut_t *t);
int case_am_mix(ut_t *t);      /* 3000 messages, all ops and sizes, target draining concurrently */
int case_am_bidir(ut_t *t);    /* the same in both directions at once (piggybacked credits) */
int case_two_eps(ut_t *t);     /* two eps to the same peer iface, each with its own stream */
int case_forged_land_area(ut_t *t); /* unimem: a peer address whose landing area would wrap */

/* RMA with the peer's rkey: sizes around every put/get boundary, guard bytes around the target */
int case_put_short(ut_t *t);
int case_put_bcopy(ut_t *t);
int case_put_zcopy(ut_t *t);
int case_get_bcopy(ut_t *t);
int case_get_zcopy(ut_t *t);
int case_rkeys(ut_t *t);       /* a second region with its own rkey; both keys must address right */
int case_rkey_reuse(ut_t *t);  /* released keys' mapped segments kept for the next, bounded */
int case_rkey_forged(ut_t *t); /* a key whose mapped segment names another process, or us */
int case_bcopy_mapped(ut_t *t); /* put/get bcopy straight into/from a peer segment mapped here */

/* semantics */
int case_flush(ut_t *t);       /* many puts in flight, one ep/iface flush, then all visible */
int case_fence(ut_t *t);       /* data put, fence, flag put (or am): flag never before data */
int case_fence_ifaces(ut_t *t); /* ud_zcopy: a fence on one iface holds another's later ops */
int case_atomic_order(ut_t *t); /* zcopy put, then atomic swap unfenced: swap not before put */
int case_pending_order(ut_t *t); /* a new send must not overtake a queued request */
int case_pending(ut_t *t);     /* fill to NO_RESOURCE, pending_add, all arrive once, in order */
int case_peer_death(ut_t *t);      /* target SIGKILLed while idle: error within 10 s */
int case_peer_death_full(ut_t *t); /* ... while the ep is out of resources with pending requests */
int case_hostile_serve(ut_t *t); /* rdmach: forged served requests (cases_hostile.c) */
int case_hostile_serve_rc(ut_t *t); /* ... over RC, which serves none: dropped, counted */
int case_ep_churn(ut_t *t);    /* eps made, used, destroyed, again (UT_CHURN_CYCLES, default 40) */
int case_ep_is_connected(ut_t *t); /* UCT 1.22: the ep knows its peer's address from others' */

/* registrations (ud_zcopy's md: tests/uct/run runs these for it only) */
int case_rkey_access(ut_t *t);     /* puts/gets refused where the registration grants no access */
int case_dereg_revokes(ut_t *t);   /* deregistration stops a get being served, with an error */
int case_keys_getrandom(ut_t *t);  /* the rkey's key comes from getrandom(2) */

/* Local helpers shared by the case files. */
#define UT_GUARD 64    /* bytes checked untouched on both sides of every RMA target range */

size_t ut_min(size_t a, size_t b);
/* Which ops of a family exist, with their (capped) limits. */
size_t ut_put_max(const ut_t *t, uint64_t flag);
size_t ut_get_max(const ut_t *t, uint64_t flag);

/* One put of len bytes from local (registered buffer buf, at offset loff) to peer offset roff,
 * with the given op flag (UCT_IFACE_FLAG_PUT_SHORT/BCOPY/ZCOPY). comp is used by zcopy: the
 * result may be UCS_INPROGRESS. Retries on NO_RESOURCE. */
ucs_status_t ut_put(ut_t *t, uint64_t op, ut_buf_t *buf, size_t loff, size_t len, uint64_t raddr,
                    uct_rkey_t rkey, ut_comp_t *comp);
/* One get (UCT_IFACE_FLAG_GET_SHORT/BCOPY/ZCOPY) into buf at loff, waited for. */
ucs_status_t ut_get(ut_t *t, uint64_t op, ut_buf_t *buf, size_t loff, size_t len, uint64_t raddr,
                    uct_rkey_t rkey);
const char *ut_op_name(uint64_t op);
/* The op's smallest allowed length (min_zcopy for zcopy ops, else 0), and want clamped to the
 * op's [min, max]. */
size_t ut_op_min(const ut_t *t, uint64_t op);
size_t ut_op_len(const ut_t *t, uint64_t op, size_t want);

/* Put verification: the target serves "check" requests until "check done" (region2 may be NULL);
 * the initiator asks for one check and learns whether the data arrived with guards intact. */
int ut_serve_put_checks(ut_t *t, uint8_t *region2);
int ut_request_put_check(ut_t *t, unsigned seed, size_t off, size_t len, unsigned which);

/* Pending requests carrying am_short number seq of the rule-based stream (ut_rule_len). */
typedef struct pending_req {
    uct_pending_req_t uct;
    ut_t              *t;
    size_t            seq;
    int               dispatched;   /* times the callback sent it */
    int               purged;       /* times uct_ep_pending_purge returned it */
} pending_req_t;

ucs_status_t ut_send_seq(ut_t *t, size_t seq);
/* Sends the stream from 0 until UCS_ERR_NO_RESOURCE; returns how many were sent; *no_resource
 * says whether NO_RESOURCE was reached (else a diagnostic was printed). */
size_t ut_fill_until_no_resource(ut_t *t, size_t *no_resource);
/* Queues reqs with seq from first (sending directly on UCS_ERR_BUSY); returns the queued count
 * or -1. */
int  ut_add_pending(ut_t *t, pending_req_t *reqs, int n, size_t first);
void ut_pending_purge_cb(uct_pending_req_t *self, void *arg);

/* 1 if the iface has every flag; else prints "skip: no ..." and returns 0. */
int ut_need(ut_t *t, uint64_t flags);

/* Background pattern of exposed regions, and its check/restore over [off, off+len). */
#define UT_BG_SEED 0xb6u
ssize_t ut_bg_check(const uint8_t *region, size_t off, size_t len);
void    ut_bg_fill(uint8_t *region, size_t off, size_t len);

#endif
