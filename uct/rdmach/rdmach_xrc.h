/*
 * rdmach XRC connection sharing (MVAPICH with XRC, Panda, OFA 2007): which QP serves which
 * remote process, as plain C with no verbs, so that the logic is unit-tested with in-memory
 * hosts and processes (tests/unit/rdmach_xrc_test.cc) and the RC wire only carries it out
 * (rdmach_rc_xrc.c: the ops below over libibverbs).
 *
 * XRC in brief. The processes of a host share one XRC domain. A receiving process has one XRC
 * SRQ in it. A sender reaches a remote process through an INI QP (in the sender) connected to
 * a TGT QP (in the remote host's domain): every WR names the destination SRQ, and a TGT QP
 * delivers to any SRQ of its domain. So one INI QP per remote *host* reaches every process
 * there: a process needs QPs per host, not per process. The rings, and their protocol, are
 * still per connection.
 *
 * What UCT gives to set this up: connect ep to ep, one exchange of ep addresses through UCP's
 * wireup (A packs its address before it knows B's host; B connects and packs; A connects; or,
 * when both sides start at once, both connect with the other's first address). A new host
 * connection needs the TGT side's QP number at the INI side and the INI's at the TGT side, so
 * every connection offers candidates in its address:
 *  - an INI candidate (ours, to use if we have no host connection to the peer's host yet), and
 *  - a TGT candidate (in our domain, for the peer's INI candidate).
 * At connect, with the peer's host now known (its device address):
 *  - receive side: if the peer's address says which TGT on our host its INI reaches (tgt_used:
 *    it connected first), our TGT candidate is wired to the peer's INI if that is the one, else
 *    it goes back to the pool and we take a reference on the TGT named (a TGT QP is destroyed
 *    with its last reference, so it lives while any process it serves lives). If the peer has
 *    not decided yet, our candidate is wired to its INI candidate speculatively (pending),
 *    until the peer's notice says which TGT it uses.
 *  - send side: a confirmed host connection to that host is shared (the INI candidate goes
 *    back to the pool); else the INI candidate is wired to the peer's TGT candidate and becomes
 *    a new host connection. A host connection is confirmed once a completion shows that its
 *    TGT answers (or at once, when the peer's address says it wired its TGT already); until
 *    then other connections to that host do not share it, so none of them sends into a TGT
 *    that is not ready yet.
 *  - either way we owe the peer a notice: the TGT on its host our INI reaches (the wire writes
 *    it into the peer's connection block; the peer resolves its pending TGT with it).
 * Candidates come from small pools, so a process creates about one QP per host connection.
 *
 * Not thread-safe: called under the iface's progress, as the rest of the wire.
 */
#ifndef RDMACH_XRC_H
#define RDMACH_XRC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RDMACH_XRC_HOST_MAX  24   /* bytes of a host key (the port's device address) */
#define RDMACH_XRC_POOL      4    /* unused candidates kept per kind */

/* What the core asks of the device; arg is rdmach_xrc_init's. The handles are the wire's. */
typedef struct rdmach_xrc_ops {
    /* A new INI or TGT QP, not connected: its handle, *qpn its number; NULL on failure. */
    void *(*ini_create)(void *arg, uint32_t *qpn);
    void *(*tgt_create)(void *arg, uint32_t *qpn);
    /* Connects an INI to the TGT tgt_qpn on host, or a TGT to the INI ini_qpn on host. 0 or
     * -errno. */
    int   (*ini_connect)(void *arg, void *ini, const void *host, uint32_t tgt_qpn);
    int   (*tgt_connect)(void *arg, void *tgt, const void *host, uint32_t ini_qpn);
    /* A reference on the TGT tgt_qpn of our domain (another process created it); NULL if it is
     * gone. */
    void *(*tgt_open)(void *arg, uint32_t tgt_qpn);
    /* Drops a QP handle (an INI, a TGT we created, or a reference we opened). */
    void  (*release)(void *arg, void *qp);
} rdmach_xrc_ops_t;

/* The XRC part of a connection's ep address. */
typedef struct rdmach_xrc_addr {
    uint32_t ini_qpn;    /* the INI we send to you through: a candidate until we connected */
    uint32_t tgt_qpn;    /* our TGT candidate, for your INI candidate */
    uint32_t tgt_used;   /* 0: not connected yet; else the TGT on your host our INI reaches */
} __attribute__((packed)) rdmach_xrc_addr_t;

/* A host connection: our INI QP to a remote host's TGT. */
typedef struct rdmach_xrc_host {
    uint8_t  key[RDMACH_XRC_HOST_MAX];
    void     *ini;
    uint32_t ini_qpn, tgt_qpn;
    uint32_t users;       /* connections sending through it; 0: the slot is free */
    int      confirmed;   /* its TGT answers: other connections may share it */
    int      failed;      /* its INI broke: no new connection takes it */
} rdmach_xrc_host_t;

/* A TGT QP of our host that a connection of ours receives through. */
typedef struct rdmach_xrc_tgt {
    void     *qp;
    uint32_t qpn;
    uint32_t refs;        /* connections receiving through it; 0: the slot is free */
    int      owned;       /* we created it (else a reference on another process's) */
} rdmach_xrc_tgt_t;

/* A connection's part. */
typedef struct rdmach_xrc_conn {
    int      host;          /* rdmach_xrc_t.hosts index it sends through, -1 before connect */
    int      tgt;           /* tgts index it receives through, -1 */
    int      pending;       /* tgt is our candidate wired speculatively: awaits the notice */
    uint32_t tgt_used;      /* after connect: the TGT on the peer's host we reach (notice) */
    void     *ini_cand, *tgt_cand;
    uint32_t ini_cand_qpn, tgt_cand_qpn;
} rdmach_xrc_conn_t;

typedef struct rdmach_xrc_stats {
    uint64_t qps_created;       /* INI and TGT QPs created */
    uint64_t tgt_opens;         /* references taken on other processes' TGTs */
    uint64_t host_connects;     /* host connections made (INI wired to a TGT) */
    uint64_t shared;            /* connections that reused a host connection */
    uint64_t bad_notices;       /* notices that contradict what the connection knows */
} rdmach_xrc_stats_t;

typedef struct rdmach_xrc {
    const rdmach_xrc_ops_t *ops;
    void                   *arg;
    size_t                 host_len;     /* bytes of a host key used */
    rdmach_xrc_host_t      *hosts;       /* [max] */
    rdmach_xrc_tgt_t       *tgts;        /* [max] */
    unsigned               max;          /* connections at most (and so hosts and TGTs) */
    void                   *ini_pool[RDMACH_XRC_POOL], *tgt_pool[RDMACH_XRC_POOL];
    uint32_t               ini_pool_qpn[RDMACH_XRC_POOL], tgt_pool_qpn[RDMACH_XRC_POOL];
    unsigned               nini_pool, ntgt_pool;
    rdmach_xrc_stats_t     stats;
} rdmach_xrc_t;

/* max: connections at most; host_len: bytes of the host keys (<= RDMACH_XRC_HOST_MAX).
 * 0 or -errno. */
int  rdmach_xrc_init(rdmach_xrc_t *x, const rdmach_xrc_ops_t *ops, void *arg, unsigned max,
                     size_t host_len);
void rdmach_xrc_cleanup(rdmach_xrc_t *x);

/* ep_open: the connection's candidates (from the pools, else created). 0 or -errno. */
int  rdmach_xrc_conn_open(rdmach_xrc_t *x, rdmach_xrc_conn_t *c);
/* ep_pack_addr. */
void rdmach_xrc_conn_pack(const rdmach_xrc_t *x, const rdmach_xrc_conn_t *c,
                          rdmach_xrc_addr_t *addr);
/* ep_connect to a peer on host (host_len bytes) with the address it sent: the decisions above.
 * Afterwards c->host is the host connection to send through (x->hosts[c->host].ini) and
 * c->tgt_used the notice the wire owes the peer. 0 or -errno: the connection fails (a
 * candidate that a failed step may have half connected is released, never pooled). */
int  rdmach_xrc_conn_connect(rdmach_xrc_t *x, rdmach_xrc_conn_t *c, const void *host,
                             const rdmach_xrc_addr_t *peer);
/* The peer's notice arrived: its INI reaches us through the TGT tgt_qpn of our host. Resolves a
 * pending connection (our candidate is kept if named, else released for a reference on the one
 * named). 0, -EPROTO for a notice that contradicts a resolved connection (counted, ignored),
 * or -errno (the TGT named is gone). */
int  rdmach_xrc_notice(rdmach_xrc_t *x, rdmach_xrc_conn_t *c, uint32_t tgt_qpn);
/* A completion of host connection h succeeded: its TGT answers. */
void rdmach_xrc_confirm(rdmach_xrc_t *x, int h);
/* Host connection h broke (a WR failed): every connection sending through it fails (the wire
 * fails them); new connections to that host make a new one. */
void rdmach_xrc_host_failed(rdmach_xrc_t *x, int h);
/* The connection ends: its candidates go back, its host connection and TGT lose a user (and
 * go with their last). */
void rdmach_xrc_conn_close(rdmach_xrc_t *x, rdmach_xrc_conn_t *c);

/* Live QPs of this process: INI QPs of host connections, TGT QPs held (created or opened),
 * candidates in pools and connections. */
typedef struct rdmach_xrc_count {
    unsigned ini, tgt_owned, tgt_opened, candidates;
} rdmach_xrc_count_t;
void rdmach_xrc_count(const rdmach_xrc_t *x, const rdmach_xrc_conn_t *conns, unsigned nconns,
                      rdmach_xrc_count_t *count);

/* The steady state the sharing above reaches in a job of ppn processes on each of nodes
 * hosts where every process talks to every process on the other hosts (the resource model,
 * perf/resource_model; the unit test checks it against the core on in-memory hosts). */
typedef struct rdmach_xrc_model {
    uint64_t ini_per_proc;      /* host connections: one per remote host */
    uint64_t tgt_per_node;      /* TGT QPs on a host: one per INI that reaches it */
    uint64_t setups_per_proc;   /* QPs a process connects: its INIs, and as many TGTs on
                                 * average (the TGTs of a host are made by its processes) */
} rdmach_xrc_model_t;
void rdmach_xrc_model(uint64_t ppn, uint64_t nodes, rdmach_xrc_model_t *model);

#ifdef __cplusplus
}
#endif

#endif
