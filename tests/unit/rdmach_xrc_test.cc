/*
 * rdmach XRC connection sharing core (rdmach_xrc.c) on an in-memory fabric: hosts, processes
 * with their XRC SRQs, INI and TGT QPs as the core asks for them. A message from X to Y is
 * delivered only the way XRC would: X's INI for Y's host is connected to a TGT on Y's host,
 * that TGT is alive (some process holds it) and connected back to that INI, and Y's SRQ is
 * in the same host's XRC domain. No device: the device is rdma-core's business; what is
 * tested is which QP serves which process and how many exist.
 */
#include <gtest/gtest.h>

extern "C" {
#include "rdmach_xrc.h"
}

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <vector>

namespace {

struct Qp {
    uint32_t qpn;
    bool     tgt;
    int      host;
    int      handles = 0;      /* processes holding it: gone with the last */
    bool     connected = false;
    uint32_t dest = 0;         /* INI: the TGT it sends to; TGT: the INI it accepts */
    int      dest_host = -1;
};

struct Fabric;

struct Handle {
    Fabric   *f;
    uint32_t qpn;
};

struct Proc;

struct Fabric {
    std::map<uint32_t, Qp> qps;
    uint32_t next_qpn    = 100;
    int      fail_in = 0;          /* > 0: the create that many from now fails */

    bool alive(uint32_t qpn) const
    {
        auto it = qps.find(qpn);
        return (it != qps.end()) && (it->second.handles > 0);
    }
    Qp &qp(uint32_t qpn) { return qps.at(qpn); }
    /* connected QPs (candidates in pools are not) */
    size_t live(bool tgt, int host) const
    {
        size_t n = 0;
        for (auto &kv : qps) {
            n += (kv.second.handles > 0) && kv.second.connected && (kv.second.tgt == tgt) &&
                 (kv.second.host == host);
        }
        return n;
    }
    size_t live_all() const
    {
        size_t n = 0;
        for (auto &kv : qps) {
            n += kv.second.handles > 0;
        }
        return n;
    }
};

struct Proc {
    Fabric            *f;
    int               host;
    int               id;
    rdmach_xrc_t      x;
    bool              open = false;
    std::map<int, rdmach_xrc_conn_t> conns;   /* by peer id */
};

uint64_t host_key(int host) { return 0x9e3779b97f4a7c15ull * (uint64_t)(host + 1); }

int key_host(const void *key)
{
    uint64_t k;
    memcpy(&k, key, sizeof(k));
    for (int h = 0; h < 1024; ++h) {
        if (host_key(h) == k) {
            return h;
        }
    }
    return -1;
}

void *create(Proc *p, uint32_t *qpn, bool tgt)
{
    if ((p->f->fail_in > 0) && (--p->f->fail_in == 0)) {
        return nullptr;
    }
    Qp q;
    q.qpn     = p->f->next_qpn++;
    q.tgt     = tgt;
    q.host    = p->host;
    q.handles = 1;
    p->f->qps[q.qpn] = q;
    *qpn             = q.qpn;
    return new Handle{p->f, q.qpn};
}

void *ini_create(void *arg, uint32_t *qpn) { return create((Proc*)arg, qpn, false); }
void *tgt_create(void *arg, uint32_t *qpn) { return create((Proc*)arg, qpn, true); }

int qp_connect(void *arg, void *h, const void *host, uint32_t dest)
{
    Proc *p = (Proc*)arg;
    Qp &q   = p->f->qp(((Handle*)h)->qpn);
    EXPECT_FALSE(q.connected) << "a QP is connected once";
    q.connected = true;
    q.dest      = dest;
    q.dest_host = key_host(host);
    return (q.dest_host >= 0) ? 0 : -EINVAL;
}

void *tgt_open(void *arg, uint32_t qpn)
{
    Proc *p = (Proc*)arg;
    if (!p->f->alive(qpn) || !p->f->qp(qpn).tgt || (p->f->qp(qpn).host != p->host)) {
        return nullptr;   /* gone, or not in our host's XRC domain */
    }
    ++p->f->qp(qpn).handles;
    return new Handle{p->f, qpn};
}

void release(void *arg, void *h)
{
    Handle *hd = (Handle*)h;
    (void)arg;
    Qp &q = hd->f->qp(hd->qpn);
    EXPECT_GT(q.handles, 0);
    --q.handles;
    delete hd;
}

const rdmach_xrc_ops_t ops = {ini_create, tgt_create, qp_connect, qp_connect, tgt_open,
                              release};

class Xrc : public ::testing::Test {
protected:
    Fabric f;
    std::vector<std::unique_ptr<Proc>> procs;

    Proc &spawn(int host)
    {
        procs.emplace_back(new Proc{&f, host, (int)procs.size(), {}, false, {}});
        Proc &p = *procs.back();
        EXPECT_EQ(0, rdmach_xrc_init(&p.x, &ops, &p, 256, sizeof(uint64_t)));
        p.open = true;
        return p;
    }

    void exit_proc(Proc &p)
    {
        for (auto &kv : p.conns) {
            rdmach_xrc_conn_close(&p.x, &kv.second);
        }
        p.conns.clear();
        rdmach_xrc_cleanup(&p.x);
        p.open = false;
        for (auto &q : procs) {   /* the survivors close their eps to it (UCP does) */
            auto it = q->conns.find(p.id);
            if (q->open && (it != q->conns.end())) {
                rdmach_xrc_conn_close(&q->x, &it->second);
                q->conns.erase(it);
            }
        }
    }

    void TearDown() override
    {
        for (auto &p : procs) {
            if (p->open) {
                exit_proc(*p);
            }
        }
        EXPECT_EQ(0u, f.live_all()) << "every QP handle released";
    }

    /* Would a message from a to b arrive? (the XRC path, checked hop by hop) */
    bool deliver(Proc &a, Proc &b)
    {
        auto it = a.conns.find(b.id);
        if (!a.open || !b.open || (it == a.conns.end()) || (it->second.host < 0)) {
            return false;
        }
        const rdmach_xrc_host_t &h = a.x.hosts[it->second.host];
        uint32_t ini               = ((Handle*)h.ini)->qpn;
        if (!f.alive(ini) || !f.qp(ini).connected || (f.qp(ini).dest_host != b.host)) {
            return false;
        }
        uint32_t tgt = f.qp(ini).dest;
        return f.alive(tgt) && f.qp(tgt).tgt && f.qp(tgt).connected &&
               (f.qp(tgt).host == b.host) && (f.qp(tgt).dest == ini);
    }

    /* a's traffic to b: on success the completion confirms a's host connection */
    bool send(Proc &a, Proc &b)
    {
        bool ok = deliver(a, b);
        if (ok) {
            rdmach_xrc_confirm(&a.x, a.conns[b.id].host);
        }
        return ok;
    }

    uint64_t key(Proc &p) { return host_key(p.host); }

    /* the notice a owes b, written into b's connection once a's path to b works */
    void notify(Proc &a, Proc &b)
    {
        ASSERT_TRUE(deliver(a, b));
        EXPECT_EQ(0, rdmach_xrc_notice(&b.x, &b.conns[a.id], a.conns[b.id].tgt_used));
    }

    /* UCP's wireup: a packs first, b connects and packs, a connects; then traffic */
    void wireup(Proc &a, Proc &b)
    {
        rdmach_xrc_addr_t aa, ba;
        uint64_t ka = key(a), kb = key(b);
        ASSERT_EQ(0, rdmach_xrc_conn_open(&a.x, &a.conns[b.id]));
        rdmach_xrc_conn_pack(&a.x, &a.conns[b.id], &aa);
        EXPECT_EQ(0u, aa.tgt_used);
        ASSERT_EQ(0, rdmach_xrc_conn_open(&b.x, &b.conns[a.id]));
        ASSERT_EQ(0, rdmach_xrc_conn_connect(&b.x, &b.conns[a.id], &ka, &aa));
        rdmach_xrc_conn_pack(&b.x, &b.conns[a.id], &ba);
        EXPECT_NE(0u, ba.tgt_used);
        ASSERT_EQ(0, rdmach_xrc_conn_connect(&a.x, &a.conns[b.id], &kb, &ba));
        EXPECT_FALSE(a.conns[b.id].pending) << "b's address told a which TGT it uses";
        traffic(a, b);
    }

    /* both sides start at once: each connects with the other's first address */
    void wireup_simultaneous(Proc &a, Proc &b)
    {
        rdmach_xrc_addr_t aa, ba;
        uint64_t ka = key(a), kb = key(b);
        ASSERT_EQ(0, rdmach_xrc_conn_open(&a.x, &a.conns[b.id]));
        ASSERT_EQ(0, rdmach_xrc_conn_open(&b.x, &b.conns[a.id]));
        rdmach_xrc_conn_pack(&a.x, &a.conns[b.id], &aa);
        rdmach_xrc_conn_pack(&b.x, &b.conns[a.id], &ba);
        ASSERT_EQ(0, rdmach_xrc_conn_connect(&a.x, &a.conns[b.id], &kb, &ba));
        ASSERT_EQ(0, rdmach_xrc_conn_connect(&b.x, &b.conns[a.id], &ka, &aa));
        traffic(a, b);
    }

    void traffic(Proc &a, Proc &b)
    {
        notify(a, b);
        notify(b, a);
        EXPECT_FALSE(a.conns[b.id].pending);
        EXPECT_FALSE(b.conns[a.id].pending);
        EXPECT_TRUE(send(a, b));
        EXPECT_TRUE(send(b, a));
    }

    rdmach_xrc_count_t count(Proc &p)
    {
        std::vector<rdmach_xrc_conn_t> v;
        for (auto &kv : p.conns) {
            v.push_back(kv.second);
        }
        rdmach_xrc_count_t c;
        rdmach_xrc_count(&p.x, v.data(), (unsigned)v.size(), &c);
        return c;
    }

    /* every connected process reaches its peers on other hosts */
    void all_deliver()
    {
        for (auto &a : procs) {
            for (auto &b : procs) {
                if (a->open && b->open && (a->host != b->host) && a->conns.count(b->id) &&
                    b->conns.count(a->id)) {
                    EXPECT_TRUE(deliver(*a, *b)) << a->id << " -> " << b->id;
                }
            }
        }
    }
};

/* Two hosts of 4 processes, every pair across: one INI QP per process (one remote host), the
 * TGTs of a host one per remote INI, and every message arrives. */
TEST_F(Xrc, TwoHostsManyToMany)
{
    const int P = 4;
    for (int i = 0; i < 2 * P; ++i) {
        spawn(i / P);
    }
    for (int a = 0; a < P; ++a) {
        for (int b = P; b < 2 * P; ++b) {
            if ((a + b) % 2) {
                wireup(*procs[a], *procs[b]);
            } else {
                wireup(*procs[b], *procs[a]);   /* either side may start */
            }
        }
    }
    all_deliver();
    for (auto &p : procs) {
        rdmach_xrc_count_t c = count(*p);
        EXPECT_EQ(1u, c.ini) << "process " << p->id << ": one INI for the one remote host";
        EXPECT_LE(c.candidates, 2u * RDMACH_XRC_POOL);
        EXPECT_LE(p->x.stats.qps_created, 2u + 2u * RDMACH_XRC_POOL);
        EXPECT_EQ((uint64_t)P - 1, p->x.stats.shared);
    }
    for (int h = 0; h < 2; ++h) {
        EXPECT_EQ((size_t)P, f.live(true, h)) << "host " << h << ": a TGT per remote INI";
        EXPECT_EQ((size_t)P, f.live(false, h));
    }
}

/* Both sides of every pair start at once: speculative TGTs, resolved by the notices. */
TEST_F(Xrc, SimultaneousWireup)
{
    const int P = 3;
    for (int i = 0; i < 2 * P; ++i) {
        spawn(i / P);
    }
    for (int a = 0; a < P; ++a) {
        for (int b = P; b < 2 * P; ++b) {
            wireup_simultaneous(*procs[a], *procs[b]);
        }
    }
    all_deliver();
    for (auto &p : procs) {
        /* the first pair of each process made its host connection at once; later ones find
         * it confirmed by the first traffic */
        EXPECT_EQ(1u, count(*p).ini) << p->id;
    }
}

/* Until a host connection is confirmed, another connection to that host makes its own (never
 * sends into a TGT that may not be connected yet); after, they share. */
TEST_F(Xrc, UnconfirmedHostIsNotShared)
{
    Proc &a = spawn(0), &b1 = spawn(1), &b2 = spawn(1), &b3 = spawn(1);
    rdmach_xrc_addr_t aa, ba;
    uint64_t kb = key(b1);

    ASSERT_EQ(0, rdmach_xrc_conn_open(&a.x, &a.conns[b1.id]));
    ASSERT_EQ(0, rdmach_xrc_conn_open(&b1.x, &b1.conns[a.id]));
    rdmach_xrc_conn_pack(&b1.x, &b1.conns[a.id], &ba);
    ASSERT_EQ(0, rdmach_xrc_conn_connect(&a.x, &a.conns[b1.id], &kb, &ba));   /* a first */
    EXPECT_FALSE(a.x.hosts[a.conns[b1.id].host].confirmed);
    EXPECT_FALSE(deliver(a, b1)) << "b1 has not wired its TGT yet";
    wireup(a, b2);   /* a's first host connection is unconfirmed: a second one */
    EXPECT_EQ(2u, count(a).ini);
    uint64_t ka = key(a);
    rdmach_xrc_conn_pack(&a.x, &a.conns[b1.id], &aa);
    ASSERT_EQ(0, rdmach_xrc_conn_connect(&b1.x, &b1.conns[a.id], &ka, &aa));
    traffic(a, b1);
    wireup(a, b3);   /* shares a confirmed one */
    EXPECT_EQ(2u, count(a).ini);
    EXPECT_EQ(1u, a.x.stats.shared);
    all_deliver();
}

/* Eight hosts of four: a process has N-1 INI QPs where RC would have P*(N-1) QPs. */
TEST_F(Xrc, ManyHostsRandomOrder)
{
    const int N = 8, P = 4;
    std::vector<std::pair<int, int>> pairs;
    for (int i = 0; i < N * P; ++i) {
        spawn(i / P);
    }
    for (int a = 0; a < N * P; ++a) {
        for (int b = a + 1; b < N * P; ++b) {
            if (a / P != b / P) {
                pairs.push_back({a, b});
            }
        }
    }
    std::mt19937 rng(7);
    std::shuffle(pairs.begin(), pairs.end(), rng);
    for (size_t i = 0; i < pairs.size(); ++i) {
        Proc &a = *procs[pairs[i].first], &b = *procs[pairs[i].second];
        if (i % 3 == 0) {
            wireup_simultaneous(a, b);
        } else if (i % 3 == 1) {
            wireup(a, b);
        } else {
            wireup(b, a);
        }
    }
    all_deliver();
    size_t tgts = 0;
    for (auto &p : procs) {
        EXPECT_EQ((unsigned)N - 1, count(*p).ini) << p->id;
    }
    for (int h = 0; h < N; ++h) {
        tgts += f.live(true, h);
    }
    EXPECT_EQ((size_t)(N * P * (N - 1)), tgts) << "a TGT per INI, summed over hosts";
    /* the resource model's steady state is this one */
    rdmach_xrc_model_t m;
    rdmach_xrc_model(P, N, &m);
    for (auto &p : procs) {
        EXPECT_EQ(m.ini_per_proc, count(*p).ini);
    }
    EXPECT_EQ(m.tgt_per_node * N, (uint64_t)tgts);
    uint64_t setups = 0;
    for (auto &p : procs) {
        setups += p->x.stats.host_connects;   /* INIs connected */
    }
    setups += tgts;                           /* and the TGTs they reach */
    EXPECT_EQ(m.setups_per_proc * N * P, setups);
}

/* A TGT lives while a process it serves lives: the one that created it may leave first. */
TEST_F(Xrc, ProcessesComeAndGo)
{
    Proc &a = spawn(0), &b1 = spawn(1), &b2 = spawn(1);
    wireup(a, b1);   /* a's INI reaches host 1 through a TGT b1 created */
    wireup(a, b2);   /* shared: b2 takes a reference on b1's TGT */
    EXPECT_EQ(1u, b2.x.stats.tgt_opens);
    exit_proc(b1);
    EXPECT_TRUE(deliver(a, b2)) << "b2's reference keeps the TGT";
    Proc &b3 = spawn(1);
    wireup(b3, a);
    EXPECT_EQ(1u, count(a).ini);
    all_deliver();
    exit_proc(b2);
    exit_proc(b3);
    EXPECT_EQ(0u, count(a).ini) << "the last connection to a host takes its INI along";
    EXPECT_EQ(0u, f.live(true, 1)) << "no process on host 1: no TGT left there";
    Proc &b4 = spawn(1);
    wireup(a, b4);
    all_deliver();
    EXPECT_EQ(1u, count(a).ini);
}

/* A host connection that broke is not taken by new connections; the old ones fail (the wire
 * fails them), the new ones make a new INI. */
TEST_F(Xrc, BrokenHostConnection)
{
    Proc &a = spawn(0), &b1 = spawn(1), &b2 = spawn(1);
    wireup(a, b1);
    int h = a.conns[b1.id].host;
    rdmach_xrc_host_failed(&a.x, h);
    wireup(a, b2);
    EXPECT_NE(h, a.conns[b2.id].host);
    EXPECT_EQ(2u, count(a).ini);
    exit_proc(b1);   /* its connections failed: both sides close them */
    EXPECT_EQ(1u, count(a).ini);
    all_deliver();
}

/* Notices that do not fit are counted and change nothing; a TGT that is gone fails the
 * connect; creation failures leak nothing. */
TEST_F(Xrc, BadInput)
{
    Proc &a = spawn(0), &b1 = spawn(1), &b2 = spawn(1);
    rdmach_xrc_conn_t c;

    ASSERT_EQ(0, rdmach_xrc_conn_open(&a.x, &c));
    EXPECT_EQ(-EPROTO, rdmach_xrc_notice(&a.x, &c, 12345)) << "not connected";
    rdmach_xrc_conn_close(&a.x, &c);

    wireup(a, b1);
    uint32_t tgt = a.x.tgts[a.conns[b1.id].tgt].qpn;
    EXPECT_EQ(-EPROTO, rdmach_xrc_notice(&a.x, &a.conns[b1.id], tgt + 1000));
    EXPECT_EQ(-EPROTO, rdmach_xrc_notice(&a.x, &a.conns[b1.id], 0));
    EXPECT_EQ(3u, a.x.stats.bad_notices);
    EXPECT_EQ(tgt, a.x.tgts[a.conns[b1.id].tgt].qpn);
    all_deliver();

    /* b2's peer names a TGT that is gone by the time b2 connects */
    rdmach_xrc_addr_t aa;
    uint64_t ka = key(a);
    ASSERT_EQ(0, rdmach_xrc_conn_open(&b2.x, &b2.conns[a.id]));
    aa          = {a.x.hosts[a.conns[b1.id].host].ini_qpn, 0, 99999};
    EXPECT_EQ(-ESRCH, rdmach_xrc_conn_connect(&b2.x, &b2.conns[a.id], &ka, &aa));
    aa = {0, 0, 0};
    EXPECT_EQ(-EPROTO, rdmach_xrc_conn_connect(&b2.x, &b2.conns[a.id], &ka, &aa));
    rdmach_xrc_conn_close(&b2.x, &b2.conns[a.id]);
    b2.conns.erase(a.id);

    /* a process with empty pools: the INI fails, then the TGT (the INI goes to the pool) */
    Proc &a2  = spawn(0);
    f.fail_in = 1;
    EXPECT_EQ(-ENOMEM, rdmach_xrc_conn_open(&a2.x, &c)) << "the INI candidate failed";
    EXPECT_EQ(0u, count(a2).candidates);
    f.fail_in = 2;
    EXPECT_EQ(-ENOMEM, rdmach_xrc_conn_open(&a2.x, &c)) << "the TGT candidate failed";
    EXPECT_EQ(1u, count(a2).candidates) << "the INI candidate went back to the pool";

    rdmach_xrc_t y;
    EXPECT_EQ(-EINVAL, rdmach_xrc_init(&y, &ops, nullptr, 0, 8));
    EXPECT_EQ(-EINVAL, rdmach_xrc_init(&y, &ops, nullptr, 4, 0));
    EXPECT_EQ(-EINVAL, rdmach_xrc_init(&y, &ops, nullptr, 4, RDMACH_XRC_HOST_MAX + 1));
}

} // namespace

/* ---- the XRC domain file (rdmach_rc_xrc.c): in /dev/shm, where anyone may create it ---- */

extern "C" {
#include "ucx_ext_sys.h"
}
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace {

struct OwnFile : ::testing::Test {
    std::string dir, path;
    char why[256] = {};

    void SetUp() override
    {
        char tmpl[] = "/tmp/rdmach-xrcd-test.XXXXXX";
        ASSERT_NE(nullptr, mkdtemp(tmpl));
        dir  = tmpl;
        path = dir + "/ucx-rdmach-xrcd.test";
    }
    void TearDown() override
    {
        unlink(path.c_str());
        unlink((dir + "/target").c_str());
        rmdir(dir.c_str());
    }
};

} // namespace

TEST_F(OwnFile, CreatedOrOursIsOpened)
{
    int fd = ucx_ext_open_own_file(path.c_str(), why, sizeof(why));
    ASSERT_GE(fd, 0) << why;
    struct stat st;
    ASSERT_EQ(0, fstat(fd, &st));
    EXPECT_EQ(geteuid(), st.st_uid);
    EXPECT_EQ(0400u, st.st_mode & 0777u);
    close(fd);
    fd = ucx_ext_open_own_file(path.c_str(), why, sizeof(why));   /* again: ours */
    EXPECT_GE(fd, 0) << why;
    close(fd);
}

TEST_F(OwnFile, ASymbolicLinkIsRefused)
{
    int fd = open((dir + "/target").c_str(), O_CREAT | O_WRONLY, 0600);
    ASSERT_GE(fd, 0);
    close(fd);
    ASSERT_EQ(0, symlink((dir + "/target").c_str(), path.c_str()));
    EXPECT_EQ(-ELOOP, ucx_ext_open_own_file(path.c_str(), why, sizeof(why)));
    EXPECT_NE(nullptr, strstr(why, "a symbolic link: refused")) << why;
}

TEST_F(OwnFile, AFileWritableByOthersIsRefused)
{
    int fd = open(path.c_str(), O_CREAT | O_WRONLY, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(0, fchmod(fd, 0666));
    close(fd);
    EXPECT_EQ(-EPERM, ucx_ext_open_own_file(path.c_str(), why, sizeof(why)));
    EXPECT_NE(nullptr, strstr(why, "writable by others (mode 666): refused")) << why;
}

/* Another user made it first (root can make it so; as another user the test cannot). */
TEST_F(OwnFile, AFileOfAnotherUserIsRefused)
{
    if (geteuid() != 0) {
        GTEST_SKIP() << "needs root to give the file away";
    }
    int fd = open(path.c_str(), O_CREAT | O_WRONLY, 0400);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(0, fchown(fd, 65534, 65534));
    close(fd);
    EXPECT_EQ(-EPERM, ucx_ext_open_own_file(path.c_str(), why, sizeof(why)));
    EXPECT_NE(nullptr, strstr(why, "is owned by uid 65534, not by us (uid 0): refused")) << why;
}

TEST_F(OwnFile, ADirectoryIsRefused)
{
    ASSERT_EQ(0, mkdir(path.c_str(), 0700));
    EXPECT_GT(0, ucx_ext_open_own_file(path.c_str(), why, sizeof(why)));
    rmdir(path.c_str());
}
