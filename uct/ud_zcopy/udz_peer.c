/*
 * ud_zcopy core, the peer table: one small record per peer, created on first contact and found
 * by its wire address through a hash that doubles as peers come. A new cookie at a known address
 * is a new incarnation of the process there: the old record fails and a fresh one takes the
 * address. Failure fans out to every part of the core (udz_core_int.h).
 */
#include "udz_core_int.h"

#include <sys/random.h>

#define UDZ_PEER_TABLE_MIN 64   /* buckets of a new peer table */

size_t udz_peer_state_bytes(void)
{
    return sizeof(udz_peer_t) + sizeof(udz_peer_t*);    /* + its hash slot */
}

void udz_peer_set_user(udz_peer_t *peer, void *user) { peer->user = user; }
void *udz_peer_user(const udz_peer_t *peer) { return peer->user; }
int udz_peer_is_failed(const udz_peer_t *peer) { return peer->failed; }

static void peer_hash_insert(udz_core_t *core, udz_peer_t *p)
{
    unsigned b = addr_hash(&p->addr) & core->hmask;

    p->hnext = core->htab[b];
    core->htab[b] = p;
    p->hashed = 1;
}

static void peer_hash_remove(udz_core_t *core, udz_peer_t *p)
{
    udz_peer_t **pp;

    for (pp = &core->htab[addr_hash(&p->addr) & core->hmask]; *pp != NULL; pp = &(*pp)->hnext) {
        if (*pp == p) {
            *pp = p->hnext;
            p->hashed = 0;
            return;
        }
    }
}

static int peer_hash_grow(udz_core_t *core)
{
    unsigned size = (core->hmask + 1) * 2, i;
    udz_peer_t **old = core->htab, *p, *n;
    unsigned old_size = core->hmask + 1;

    core->htab = calloc(size, sizeof(*core->htab));
    if (core->htab == NULL) {
        core->htab = old;
        return -ENOMEM;
    }
    core->hmask = size - 1;
    for (i = 0; i < old_size; ++i) {
        for (p = old[i]; p != NULL; p = n) {
            n = p->hnext;
            peer_hash_insert(core, p);
        }
    }
    core->cnt->peer_state_bytes += (size - old_size) * sizeof(udz_peer_t*);
    free(old);
    return 0;
}

/* A random, non-zero challenge. The cookies cannot serve: an observer knows them, and the
 * peer's is the peer's own choice. From getrandom, 16 at a time (a flood of new sources costs
 * one call per 16); if it fails, a mix of the clock and a counter keyed by our cookie, which
 * still keeps a blind stranger out. */
static uint64_t peer_random(udz_core_t *core)
{
    uint64_t v;

    if (core->rnd_left == 0) {
        if (getrandom(core->rnd, sizeof(core->rnd), GRND_NONBLOCK) == (ssize_t)sizeof(core->rnd)) {
            core->rnd_left = sizeof(core->rnd) / sizeof(core->rnd[0]);
        } else {
            /* rnd[0] counts (the core's own: cores of other threads share nothing) */
            v = (core->cookie ^ core->now ^ (++core->rnd[0] * 0x9e3779b97f4a7c15ull)) *
                0xbf58476d1ce4e5b9ull;
            v ^= v >> 31;
            return v | 1;
        }
    }
    v = core->rnd[--core->rnd_left];
    return (v != 0) ? v : 1;
}

/* ---- address validation ----
 *
 * A datagram's source address is the sender's word: anybody who learned the cookies can put
 * another host's address there. The owner of a region therefore serves a peer's ZREQs only
 * after the peer echoed a random value (chal) sent to that address, as QUIC and DTLS validate
 * an address: until then the transfer waits, and the owner sends that address one CHAL per
 * datagram it received from it (a ZREQ, a ZACK, a CHAL), never larger, so a forged source gets
 * nothing from us it could not have sent itself. A peer we connect to (udz_peer_get from the
 * glue: UCP gave us its address) gets our challenge at once, and answers with its own: both
 * sides are valid a round trip after the first contact, usually before the first ZREQ, so an
 * honest get does not wait. A lost CHAL is made up by the next ZREQ or ZACK (the requester's
 * stuck timer sends one). Every CHAL carries our piggybacked ack, like any control datagram. */
void udz_peer_chal_send(udz_core_t *core, udz_peer_t *p, uint64_t echo)
{
    udz_chal_t c;

    c.echo = echo;
    c.chal = p->valid ? 0 : p->chal;
    if ((c.echo == 0) && (c.chal == 0)) {
        return;
    }
    core->cnt->chal_sent += (c.chal != 0);
    udz_stream_send_zctl(core, p, UDZ_T_CHAL, 0, 0, &c, sizeof(c));
}

void udz_peer_on_chal(udz_core_t *core, udz_peer_t *p, const udz_chal_t *c)
{
    if ((c->echo != 0) && !p->valid) {
        if (c->echo != p->chal) {
            core->cnt->chal_wrong++;    /* forged, or not ours: changes nothing */
        } else {
            p->valid = 1;
            core->cnt->chal_valid++;
            peer_activate(core, p);     /* its waiting transfers start at the next pump */
        }
    }
    if (c->chal != 0) {
        udz_peer_chal_send(core, p, c->chal);   /* the echo, and ours if we still need it */
    }
}

udz_peer_t *udz_peer_create(udz_core_t *core, const udz_addr_t *addr, uint64_t cookie)
{
    udz_peer_t *p;

    if (core->npeers >= core->cfg.max_peers) {
        return NULL;
    }
    if ((core->npeers + 1 > core->hmask + 1) && (peer_hash_grow(core) != 0)) {
        return NULL;
    }
    p = calloc(1, sizeof(*p));
    if (p == NULL) {
        return NULL;
    }
    p->addr        = *addr;
    p->cookie      = cookie;
    p->chal        = peer_random(core);
    p->heard_live  = core->live;
    p->next_psn    = 1;
    p->rx_expected = 1;
    dl_init(&p->active);
    dl_add(&core->all, &p->all);
    peer_hash_insert(core, p);
    core->npeers++;
    core->cnt->peers++;
    core->cnt->peer_state_bytes += sizeof(*p);
    return p;
}

/* p failed and nobody holds it: off the hash (a late datagram of it finds no record, and
 * cannot start one unless it is a CHAL or a psn 1: rx_ctrl) and onto core->dead, freed at the
 * end of progress, when nothing of the core points to it any more (the batch's ack list). */
static void peer_reap(udz_core_t *core, udz_peer_t *p)
{
    if (p->reaped) {
        return;
    }
    if (p->hashed) {
        peer_hash_remove(core, p);
    }
    dl_del(&p->all);
    p->reaped  = 1;
    p->hnext   = core->dead;
    core->dead = p;
    core->npeers--;
}

void udz_peer_reclaim(udz_core_t *core)
{
    udz_peer_t *p;

    while ((p = core->dead) != NULL) {
        core->dead = p->hnext;
        core->cnt->peers_freed++;
        free(p);    /* its packets went back to the pool when it failed (udz_stream_peer_failed) */
    }
}

void udz_peer_hold(udz_peer_t *peer) { peer->refs++; }

void udz_peer_put(udz_core_t *core, udz_peer_t *peer)
{
    if ((peer->refs > 0) && (--peer->refs == 0) && peer->failed) {
        peer_reap(core, peer);
    }
}

/* The peer is gone: drop its packets, fail its gets and transfers, tell the user once. The
 * parts are reached through core->hooks (udz_core.c): they call the peer table, so a direct
 * call back would make each of them and this file use each other's symbols. */
void udz_peer_fail(udz_core_t *core, udz_peer_t *p)
{
    unsigned i;

    if (p->failed) {
        return;
    }
    p->failed = 1;
    if (p->probes != 0) {
        p->probes = 0;
        core->probing--;
    }
    core->cnt->timeouts++;
    for (i = 0; i < sizeof(core->hooks->peer_failed) / sizeof(core->hooks->peer_failed[0]);
         ++i) {
        core->hooks->peer_failed[i](core, p);   /* stream, gets, served transfers */
    }
    if (dl_linked(&p->active)) {
        dl_del(&p->active);
    }
    core->uops->peer_failed(core->user, p);
    core->uops->resources(core->user);
    if (p->refs == 0) {
        peer_reap(core, p);     /* after the user was told: it may hold it for later */
    }
}

/* ---- unreachable reports: probed, not believed ----
 *
 * The UDP wire reports an ICMP port unreachable that names a peer's address. Anybody who can
 * send this host an IP packet can forge one: the kernel matches only the addresses the ICMP
 * quotes, and no cookie is in it. One forged report used to fail a live peer (a 2-rank MPICH
 * job under 3,240 of them never finished). So a report only starts a probe: an ACK asking for
 * an ack (UDZ_F_ACK_REQ), which a live peer answers at once (from its async timer when the
 * application is away), with its cookie; any datagram with the cookie answers it (peer_heard
 * in rx_ctrl). Unanswered, the probe is repeated UDZ_PROBES times, a gap apart on the live
 * clock (a silence this process did not listen to is no evidence), and the peer fails after
 * the last gap: a peer that is really gone still fails in UDZ_PROBES gaps (300 ms; under one
 * second as before, where the peer timeout is 30 s). Reports during a probe are counted only,
 * so a storm of them costs the peer one small datagram per answered probe at most. */
#define UDZ_PROBES         3
#define UDZ_PROBE_GAP_NS   (100ull * 1000 * 1000)

/* The gap between probes: UDZ_PROBE_GAP_NS, or the peer's retransmission timeout if longer
 * (a slow path must get its round trip). */
static uint64_t probe_gap(const udz_core_t *core, const udz_peer_t *p)
{
    uint64_t t = rto(core, p, 0);

    return (t > UDZ_PROBE_GAP_NS) ? t : UDZ_PROBE_GAP_NS;
}

static void probe_send(udz_core_t *core, udz_peer_t *p)
{
    p->probe_ms = (uint16_t)(core->live / 1000000);
    udz_stream_send_ack(core, p, UDZ_F_ACK_REQ);
    core->cnt->icmp_probes++;
}

void udz_peer_probe_start(udz_core_t *core, udz_peer_t *p)
{
    if (p->failed || (p->probes != 0)) {
        return;     /* a probe is out already: this report adds nothing */
    }
    p->probes = UDZ_PROBES;
    core->probing++;
    probe_send(core, p);
    peer_activate(core, p);     /* the stream timers run the probe's */
}

int udz_peer_probe_timer(udz_core_t *core, udz_peer_t *p)
{
    uint16_t now_ms = (uint16_t)(core->live / 1000000);

    if ((uint64_t)(uint16_t)(now_ms - p->probe_ms) * 1000000 < probe_gap(core, p)) {
        return 0;
    }
    if (p->probes == 1) {
        udz_peer_fail(core, p);     /* the last probe went unanswered too */
        return 1;
    }
    p->probes--;
    probe_send(core, p);
    return 0;
}

/* ---- idle records ----
 *
 * A record no ep holds stays as long as the peer may still talk to us with it: its stream's
 * sequence numbers are in it, and a datagram of that stream from an unknown address is dropped
 * (rx_stranger). A server with churning clients would keep one per client ever seen, up to
 * max_peers, and then refuse new ones. So a record that no ep holds, with nothing in flight
 * (no unacked packet, no transfer served) and silent for peer_idle_ns, is probed as an
 * unreachable report would have it probed (udz_peer_probe_start): a live peer answers (its async
 * timer does, when its application is away) and keeps its record; one that does not answer
 * UDZ_PROBES times is gone, fails, and its record is freed (peer_reap). A record an ep holds is
 * never probed for being idle. One walk of the records per peer_idle_scan_ns. */
void udz_peer_idle_sweep(udz_core_t *core)
{
    udz_dlist_t *e;
    udz_peer_t *p;

    core->idle_scan_live = core->live;
    for (e = core->all.next; e != &core->all; e = e->next) {
        p = container_of_(e, udz_peer_t, all);
        if ((p->refs != 0) || p->failed || (p->probes != 0) || (p->unacked != NULL) ||
            (p->ztx != NULL) || (core->hold_peer == p) ||
            (live_since(core, p->heard_live) < core->cfg.peer_idle_ns)) {
            continue;
        }
        p->heard_live = core->live;     /* one probe round per idle period */
        core->cnt->peers_idle++;
        udz_peer_probe_start(core, p);
    }
}

udz_peer_t *udz_peer_get_nochal(udz_core_t *core, const udz_addr_t *addr, uint64_t cookie)
{
    udz_peer_t *p = peer_lookup(core, addr), *n;

    if (p != NULL) {
        if (p->cookie == cookie) {
            return p;
        }
        /* the address belongs to a new incarnation: the old one has failed, kept aside for
         * whoever still holds it (an ep) and freed when nobody does; until then it counts
         * against max_peers: whoever knows our cookie cannot grow our memory without bound by
         * inventing incarnations. */
        peer_hash_remove(core, p);
        udz_peer_fail(core, p);
        n = udz_peer_create(core, addr, cookie);
        if (n != NULL) {
            n->prev_cookie = p->cookie;
        }
        return n;
    }
    return udz_peer_create(core, addr, cookie);
}

/* The glue connects to a peer whose address UCP gave it: our challenge goes at once, so that
 * the peer is valid before it asks us for data (udz_peer_chal_send). */
udz_peer_t *udz_peer_get(udz_core_t *core, const udz_addr_t *addr, uint64_t cookie,
                         const udz_chans_t *chans)
{
    udz_peer_t *p = udz_peer_get_nochal(core, addr, cookie);
    static const udz_chans_t none;

    if (p == NULL) {
        return NULL;
    }
    p->refs++;
    if ((chans != NULL) && memcmp(chans, &none, sizeof(none)) &&
        memcmp(chans, &p->chans, sizeof(*chans))) {
        /* from the address UCP gave us: transfers of this peer that waited for it go */
        p->chans = *chans;
        if (p->ztx != NULL) {
            peer_activate(core, p);
        }
    }
    if (!p->valid && !p->failed) {
        udz_peer_chal_send(core, p, 0);
    }
    return p;
}

/* Frees every peer record (and the packets still queued on them) at destroy. */
void udz_peer_table_cleanup(udz_core_t *core)
{
    udz_peer_t *p;

    while (core->all.next != &core->all) {
        p = container_of_(core->all.next, udz_peer_t, all);
        dl_del(&p->all);
        udz_skb_list_free(p->unacked);
        udz_stream_kept_drop(core, p);  /* to the core's free list, freed with it */
        free(p);
    }
    udz_peer_reclaim(core);
    free(core->htab);
}

size_t udz_peer_table_bytes(unsigned npeers)
{
    size_t size = UDZ_PEER_TABLE_MIN;

    while (npeers > size) {
        size *= 2;   /* udz_peer_create: grows when a peer more would exceed one per bucket */
    }
    return size * sizeof(udz_peer_t*);
}

int udz_peer_table_init(udz_core_t *core)
{
    dl_init(&core->active);
    dl_init(&core->all);
    core->hmask = UDZ_PEER_TABLE_MIN - 1;
    core->htab  = calloc(core->hmask + 1, sizeof(*core->htab));
    return (core->htab == NULL) ? -ENOMEM : 0;
}
