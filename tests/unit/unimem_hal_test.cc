// Unit tier for the unimem HAL's emulated backend (uct/unimem/unimem_hal_emu.c): 32-byte
// messages delivered whole and in per-sender order under concurrent senders (threads and
// processes), all-or-nothing groups, mailbox full, mailbox/channel limits, zDMA, and PDID
// refusal of mailbox messages and zDMA transfers.
#include "unimem_hal.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

const uint32_t kPdid = 7;

// A message whose 32 bytes all derive from (sender, seq): a torn or mixed message fails.
unimem_msg_t make_msg(uint32_t sender, uint32_t seq)
{
    unimem_msg_t m;
    memcpy(&m.b[0], &sender, 4);
    memcpy(&m.b[4], &seq, 4);
    for (unsigned i = 8; i < UNIMEM_HAL_MSG_SIZE; ++i) {
        m.b[i] = (uint8_t)(sender * 131u + seq * 31u + i * 7u);
    }
    return m;
}

bool check_msg(const unimem_msg_t &m, uint32_t *sender, uint32_t *seq)
{
    memcpy(sender, &m.b[0], 4);
    memcpy(seq, &m.b[4], 4);
    unimem_msg_t want = make_msg(*sender, *seq);
    return memcmp(&m, &want, sizeof(m)) == 0;
}

struct Hal {
    explicit Hal(uint32_t pdid = kPdid) { EXPECT_EQ(0, unimem_hal_open(pdid, &hal)); }
    ~Hal() { unimem_hal_close(hal); }
    unimem_hal_t *hal = nullptr;
};

struct Mbox {
    Mbox(unimem_hal_t *hal, uint32_t nslots, uint32_t senders = 64)
    {
        EXPECT_EQ(0, unimem_hal_mbox_attach(hal, nslots, senders, &mbox));
        unimem_hal_mbox_address(mbox, &addr);
    }
    ~Mbox() { unimem_hal_mbox_detach(mbox); }
    unimem_hal_mbox_t *mbox = nullptr;
    unimem_hal_mbox_addr_t addr{};
};

// Receives until total messages came (or a deadline), checking each one and per-sender order.
void receive_all(unimem_hal_mbox_t *mbox, unsigned nsenders, uint32_t per_sender)
{
    std::vector<uint32_t> next(nsenders, 0);
    unimem_msg_t msgs[32];
    uint64_t total = 0, want = (uint64_t)nsenders * per_sender;
    time_t deadline = time(nullptr) + 60;
    uint32_t sender, seq;

    while ((total < want) && (time(nullptr) < deadline)) {
        unsigned n = unimem_hal_mbox_recv(mbox, msgs, 32);
        for (unsigned i = 0; i < n; ++i) {
            ASSERT_TRUE(check_msg(msgs[i], &sender, &seq)) << "torn message after " << total;
            ASSERT_LT(sender, nsenders);
            ASSERT_EQ(next[sender], seq) << "sender " << sender << " out of order";
            ++next[sender];
        }
        total += n;
    }
    ASSERT_EQ(want, total);
    EXPECT_EQ(0u, unimem_hal_mbox_recv(mbox, msgs, 32)) << "more than was sent";
}

// Sends per_sender messages as sender id, in groups of 1..3, retrying while full.
int send_all(unimem_hal_dest_t *dest, uint32_t sender, uint32_t per_sender)
{
    uint32_t seq = 0;
    unimem_msg_t group[3];

    while (seq < per_sender) {
        unsigned n = 1 + (seq % 3);
        if (seq + n > per_sender) {
            n = per_sender - seq;
        }
        for (unsigned i = 0; i < n; ++i) {
            group[i] = make_msg(sender, seq + i);
        }
        int ret = unimem_hal_send(dest, group, n);
        if (ret == -EAGAIN) {
            sched_yield();
            continue;
        }
        if (ret != 0) {
            return ret;
        }
        seq += n;
    }
    return 0;
}

// Maps a mailbox segment the way a (misbehaving) peer could, to rewrite its published PDID.
void rewrite_pdid(const unimem_hal_mbox_addr_t &addr, uint32_t pdid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%u/fd/%d", addr.proc, addr.token);
    int fd = open(path, O_RDWR);
    ASSERT_GE(fd, 0);
    void *p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    ASSERT_NE(MAP_FAILED, p);
    memcpy((char*)p + 24, &pdid, 4);   // emu_hdr_t.pdid: magic, cookie, version, pid, pdid
    munmap(p, 4096);
}

}  // namespace

TEST(UnimemHal, MessageRoundTripAndAddress)
{
    Hal h;
    Mbox m(h.hal, 64);
    unimem_hal_dest_t *dest;
    unimem_msg_t out;
    uint32_t sender, seq;

    EXPECT_EQ(kPdid, unimem_hal_pdid(h.hal));
    EXPECT_EQ((uint32_t)getpid(), m.addr.proc);
    EXPECT_EQ(kPdid, m.addr.pdid);
    ASSERT_EQ(0, unimem_hal_dest_resolve(h.hal, &m.addr, &dest));
    EXPECT_EQ((uint32_t)getpid(), unimem_hal_dest_proc(dest));
    EXPECT_EQ(0u, unimem_hal_mbox_recv(m.mbox, &out, 1));
    unimem_msg_t in = make_msg(3, 9);
    ASSERT_EQ(0, unimem_hal_send(dest, &in, 1));
    ASSERT_EQ(1u, unimem_hal_mbox_recv(m.mbox, &out, 1));
    EXPECT_TRUE(check_msg(out, &sender, &seq));
    EXPECT_EQ(3u, sender);
    EXPECT_EQ(9u, seq);

    // resolving again shares the destination; a wrong cookie or fd is not a mailbox
    unimem_hal_dest_t *again;
    ASSERT_EQ(0, unimem_hal_dest_resolve(h.hal, &m.addr, &again));
    EXPECT_EQ(dest, again);
    unimem_hal_dest_release(again);
    unimem_hal_mbox_addr_t bad = m.addr;
    bad.cookie ^= 1;
    EXPECT_EQ(-EPROTO, unimem_hal_dest_resolve(h.hal, &bad, &again));
    bad = m.addr;
    bad.token = 987654;
    EXPECT_NE(0, unimem_hal_dest_resolve(h.hal, &bad, &again));
    unimem_hal_dest_release(dest);
}

TEST(UnimemHal, MailboxFullIsAllOrNothing)
{
    Hal h;
    Mbox m(h.hal, 64);
    unimem_hal_dest_t *dest;
    unimem_msg_t msgs[64], out[64];
    uint32_t sender, seq;

    ASSERT_EQ(0, unimem_hal_dest_resolve(h.hal, &m.addr, &dest));
    for (uint32_t i = 0; i < 64; ++i) {
        msgs[i] = make_msg(0, i);
    }
    ASSERT_EQ(0, unimem_hal_send(dest, msgs, 60));
    EXPECT_TRUE(unimem_hal_can_send(dest, 4));
    EXPECT_FALSE(unimem_hal_can_send(dest, 5));
    EXPECT_EQ(-EAGAIN, unimem_hal_send(dest, &msgs[60], 5)) << "5 messages into 4 free slots";
    ASSERT_EQ(0, unimem_hal_send(dest, &msgs[60], 4));
    EXPECT_FALSE(unimem_hal_can_send(dest, 1));
    unimem_msg_t extra = make_msg(1, 0);
    EXPECT_EQ(-EAGAIN, unimem_hal_send(dest, &extra, 1));

    // one slot freed: one message fits, a group of two still does not
    ASSERT_EQ(1u, unimem_hal_mbox_recv(m.mbox, out, 1));
    EXPECT_EQ(-EAGAIN, unimem_hal_send(dest, msgs, 2));
    ASSERT_EQ(0, unimem_hal_send(dest, &extra, 1));
    ASSERT_EQ(64u, unimem_hal_mbox_recv(m.mbox, out, 64));
    for (uint32_t i = 0; i < 63; ++i) {
        ASSERT_TRUE(check_msg(out[i], &sender, &seq));
        EXPECT_EQ(0u, sender);
        EXPECT_EQ(i + 1, seq);
    }
    ASSERT_TRUE(check_msg(out[63], &sender, &seq));
    EXPECT_EQ(1u, sender);
    EXPECT_EQ(0u, unimem_hal_mbox_recv(m.mbox, out, 64)) << "a refused group left traces";
    EXPECT_EQ(-EINVAL, unimem_hal_send(dest, msgs, 65)) << "more than the mailbox holds";
    unimem_hal_dest_release(dest);
}

// A slot's sequence word is shared memory that anyone who maps the mailbox can write. One that
// names a later lap while the tail has not moved (no sender took the slot) is refused as full:
// before, the sender re-read the tail for ever.
TEST(UnimemHal, AForgedSlotWordIsFullNotAHang)
{
    Hal h;
    Mbox m(h.hal, 64);
    unimem_hal_dest_t *dest;
    unimem_msg_t msg = make_msg(0, 0), out;
    const size_t data_off = 4096 + 65536 / 8;   // emu: header page, then the sender-id bits
    char path[64];

    ASSERT_EQ(0, unimem_hal_dest_resolve(h.hal, &m.addr, &dest));
    snprintf(path, sizeof(path), "/proc/%u/fd/%d", m.addr.proc, m.addr.token);
    int fd = open(path, O_RDWR);
    ASSERT_GE(fd, 0);
    void *p = mmap(nullptr, data_off + 64 * 64, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    ASSERT_NE(MAP_FAILED, p);
    volatile uint64_t *seq0 = (volatile uint64_t*)((char*)p + data_off);   // slot 0's seq
    ASSERT_EQ(0u, *seq0) << "slot 0 free for lap 0";
    *seq0 = 1000;
    EXPECT_EQ(-EAGAIN, unimem_hal_send(dest, &msg, 1));
    EXPECT_EQ(0u, unimem_hal_mbox_recv(m.mbox, &out, 1));
    *seq0 = 0;   // the word back: the mailbox works again
    EXPECT_EQ(0, unimem_hal_send(dest, &msg, 1));
    EXPECT_EQ(1u, unimem_hal_mbox_recv(m.mbox, &out, 1));
    munmap(p, data_off + 64 * 64);
    unimem_hal_dest_release(dest);
}

TEST(UnimemHal, ConcurrentThreadSendersDeliverWholeMessagesInOrder)
{
    Hal h;
    Mbox m(h.hal, 64);   // small: senders hit a full mailbox all the time
    const unsigned nsenders = 4;
    const uint32_t per_sender = 20000;
    std::vector<std::thread> threads;
    std::atomic<int> errors{0};

    for (unsigned s = 0; s < nsenders; ++s) {
        threads.emplace_back([&, s] {
            unimem_hal_dest_t *dest;
            if (unimem_hal_dest_resolve(h.hal, &m.addr, &dest) != 0) {
                ++errors;
                return;
            }
            if (send_all(dest, s, per_sender) != 0) {
                ++errors;
            }
            unimem_hal_dest_release(dest);
        });
    }
    receive_all(m.mbox, nsenders, per_sender);
    for (auto &t : threads) {
        t.join();
    }
    EXPECT_EQ(0, errors.load());
}

TEST(UnimemHal, ConcurrentProcessSendersDeliverWholeMessagesInOrder)
{
    Hal h;
    Mbox m(h.hal, 128);
    const unsigned nsenders = 3;
    const uint32_t per_sender = 20000;
    std::vector<pid_t> children;

    for (unsigned s = 0; s < nsenders; ++s) {
        pid_t pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            unimem_hal_t *hal;
            unimem_hal_dest_t *dest;
            if ((unimem_hal_open(kPdid, &hal) != 0) ||
                (unimem_hal_proc_id(hal) != (uint32_t)getpid()) ||
                (unimem_hal_dest_resolve(hal, &m.addr, &dest) != 0)) {
                _exit(2);
            }
            _exit(send_all(dest, s, per_sender) == 0 ? 0 : 3);
        }
        children.push_back(pid);
    }
    receive_all(m.mbox, nsenders, per_sender);
    for (pid_t pid : children) {
        int status = -1;
        ASSERT_EQ(pid, waitpid(pid, &status, 0));
        EXPECT_TRUE(WIFEXITED(status) && (WEXITSTATUS(status) == 0)) << "child status " << status;
    }
}

TEST(UnimemHal, SenderIdsAreUniqueAndBounded)
{
    Hal h;
    Mbox m(h.hal, 64, 3);
    unimem_hal_dest_t *dest;
    uint32_t id;

    ASSERT_EQ(0, unimem_hal_dest_resolve(h.hal, &m.addr, &dest));
    for (uint32_t i = 0; i < 3; ++i) {
        ASSERT_EQ(0, unimem_hal_dest_sender_id(dest, &id));
        EXPECT_EQ(i, id);
    }
    EXPECT_EQ(-ENOSPC, unimem_hal_dest_sender_id(dest, &id));
    // an id given back is handed out again: connection churn never runs out of ids
    unimem_hal_dest_sender_id_release(dest, 1);
    ASSERT_EQ(0, unimem_hal_dest_sender_id(dest, &id));
    EXPECT_EQ(1u, id);
    EXPECT_EQ(-ENOSPC, unimem_hal_dest_sender_id(dest, &id));
    unimem_hal_dest_sender_id_release(dest, 99);    // not an id: ignored
    for (uint32_t i = 0; i < 3; ++i) {
        unimem_hal_dest_sender_id_release(dest, i);
    }
    for (uint32_t i = 0; i < 100000; ++i) {
        ASSERT_EQ(0, unimem_hal_dest_sender_id(dest, &id));
        unimem_hal_dest_sender_id_release(dest, id);
    }
    unimem_hal_dest_release(dest);
}

TEST(UnimemHal, SixtyFourMailboxesAndEightChannels)
{
    Hal h;
    std::vector<unimem_hal_mbox_t*> boxes(UNIMEM_HAL_MAX_MBOX);
    unimem_hal_mbox_t *one_more;

    for (auto &b : boxes) {
        ASSERT_EQ(0, unimem_hal_mbox_attach(h.hal, 2, 1, &b));
    }
    EXPECT_EQ(-ENOSPC, unimem_hal_mbox_attach(h.hal, 2, 1, &one_more));
    unimem_hal_mbox_detach(boxes[10]);
    ASSERT_EQ(0, unimem_hal_mbox_attach(h.hal, 2, 1, &boxes[10]));
    for (auto b : boxes) {
        unimem_hal_mbox_detach(b);
    }
    EXPECT_EQ(-EINVAL, unimem_hal_mbox_attach(h.hal, 100, 1, &one_more)) << "not a power of 2";

    std::vector<unimem_hal_zdma_t*> chans(UNIMEM_HAL_MAX_ZDMA);
    unimem_hal_zdma_t *ch;
    ASSERT_EQ(0, unimem_hal_zdma_open(h.hal, 3, &chans[0]));
    EXPECT_EQ(-EBUSY, unimem_hal_zdma_open(h.hal, 3, &ch)) << "a channel has one owner";
    for (unsigned i = 1; i < UNIMEM_HAL_MAX_ZDMA; ++i) {
        ASSERT_EQ(0, unimem_hal_zdma_open(h.hal, -1, &chans[i]));
    }
    EXPECT_EQ(-ENOSPC, unimem_hal_zdma_open(h.hal, -1, &ch));
    for (auto c : chans) {
        unimem_hal_zdma_close(c);
    }
}

TEST(UnimemHal, OneProcessOneProtectionDomain)
{
    Hal h;
    unimem_hal_t *other;

    EXPECT_EQ(-EINVAL, unimem_hal_open(kPdid + 1, &other));
    EXPECT_EQ(-EINVAL, unimem_hal_open(0, &other));
    EXPECT_EQ(-EINVAL, unimem_hal_open(70000, &other));
}

TEST(UnimemHal, ZdmaReadWriteAcrossProcesses)
{
    Hal h;
    Mbox m(h.hal, 64);
    static uint8_t target[100000];

    for (size_t i = 0; i < sizeof(target); ++i) {
        target[i] = (uint8_t)(i * 13);
    }
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        // the child reads the parent's buffer and writes a transformed copy back, over zDMA
        unimem_hal_t *hal;
        unimem_hal_dest_t *dest;
        unimem_hal_zdma_t *ch;
        static uint8_t local[100000];
        uint64_t ticket = 0;
        int rc = 0;
        if ((unimem_hal_open(kPdid, &hal) != 0) || (unimem_hal_dest_resolve(hal, &m.addr, &dest)) ||
            (unimem_hal_zdma_open(hal, -1, &ch) != 0)) {
            _exit(2);
        }
        struct iovec two[2] = {{local, 1000}, {local + 1000, sizeof(local) - 1000}};
        if (unimem_hal_zdma_post(ch, dest, 0, two, 2, sizeof(local), (uintptr_t)target,
                                 &ticket) != 0) {
            rc = 3;
        } else if (unimem_hal_zdma_completed(ch) < ticket) {
            rc = 4;
        }
        for (size_t i = 0; (rc == 0) && (i < sizeof(local)); ++i) {
            if (local[i] != (uint8_t)(i * 13)) {
                rc = 5;
            }
            local[i] ^= 0xff;
        }
        struct iovec one = {local, sizeof(local)};
        if ((rc == 0) && (unimem_hal_zdma_post(ch, dest, 1, &one, 1, sizeof(local),
                                               (uintptr_t)target, &ticket) != 0)) {
            rc = 6;
        }
        // outside the target's address space: an error, no crash
        if ((rc == 0) && (unimem_hal_zdma_post(ch, dest, 1, &one, 1, 64, 8, &ticket) !=
                          -EFAULT)) {
            rc = 7;
        }
        _exit(rc);
    }
    int status = -1;
    ASSERT_EQ(pid, waitpid(pid, &status, 0));
    ASSERT_TRUE(WIFEXITED(status)) << status;
    ASSERT_EQ(0, WEXITSTATUS(status));
    for (size_t i = 0; i < sizeof(target); ++i) {
        ASSERT_EQ((uint8_t)((i * 13) ^ 0xff), target[i]) << i;
    }
}

TEST(UnimemHal, PdidRefusal)
{
    Hal h;
    Mbox m(h.hal, 64);
    static volatile uint8_t target[4096];

    // a process of another protection domain cannot resolve, send to, or zDMA into us -
    // not even by claiming our PDID in the address it uses
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        unimem_hal_t *hal;
        unimem_hal_dest_t *dest;
        if (unimem_hal_open(kPdid + 1, &hal) != 0) {
            _exit(2);
        }
        if (unimem_hal_dest_resolve(hal, &m.addr, &dest) != -EACCES) {
            _exit(3);
        }
        unimem_hal_mbox_addr_t lie = m.addr;
        lie.pdid = kPdid + 1;
        _exit(unimem_hal_dest_resolve(hal, &lie, &dest) == -EACCES ? 0 : 4);
    }
    int status = -1;
    ASSERT_EQ(pid, waitpid(pid, &status, 0));
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(0, WEXITSTATUS(status));

    // a destination resolved while in our domain, whose process then shows another PDID:
    // every message and zDMA transfer into it is refused, and nothing moves
    unimem_hal_dest_t *dest;
    unimem_hal_zdma_t *ch;
    uint8_t src[64];
    uint64_t ticket = 0;
    memset(src, 0xab, sizeof(src));
    ASSERT_EQ(0, unimem_hal_dest_resolve(h.hal, &m.addr, &dest));
    ASSERT_EQ(0, unimem_hal_zdma_open(h.hal, -1, &ch));
    struct iovec one = {src, sizeof(src)};
    ASSERT_EQ(0, unimem_hal_zdma_post(ch, dest, 1, &one, 1, 8, (uintptr_t)target, &ticket));
    EXPECT_EQ(0xab, target[7]);
    for (size_t i = 0; i < sizeof(src); ++i) {
        target[i] = 0;
    }
    rewrite_pdid(m.addr, kPdid + 1);
    EXPECT_EQ(-EACCES, unimem_hal_zdma_post(ch, dest, 1, &one, 1, sizeof(src),
                                            (uintptr_t)target, &ticket));
    EXPECT_EQ(-EACCES, unimem_hal_zdma_post(ch, dest, 0, &one, 1, sizeof(src),
                                            (uintptr_t)target, &ticket));
    for (size_t i = 0; i < sizeof(src); ++i) {
        ASSERT_EQ(0, target[i]) << "a refused zDMA moved data";
    }
    unimem_msg_t msg = make_msg(0, 0), out;
    EXPECT_EQ(-EACCES, unimem_hal_send(dest, &msg, 1));
    EXPECT_EQ(0u, unimem_hal_mbox_recv(m.mbox, &out, 1));
    rewrite_pdid(m.addr, kPdid);
    EXPECT_EQ(0, unimem_hal_send(dest, &msg, 1));
    unimem_hal_zdma_close(ch);
    unimem_hal_dest_release(dest);
}

// A mailbox detached while its process lives on (an MPI process after MPI_Finalize): a sender's
// destination still maps it and reads it closed (the glue then fails its eps); resolving it
// again is refused as a mailbox that is gone.
TEST(UnimemHal, ADetachedMailboxReadsClosed)
{
    Hal h;
    auto *m = new Mbox(h.hal, 64);
    unimem_hal_mbox_addr_t addr = m->addr;
    unimem_hal_dest_t *dest, *again;

    ASSERT_EQ(0, unimem_hal_dest_resolve(h.hal, &addr, &dest));
    EXPECT_EQ(0, unimem_hal_dest_closed(dest));
    delete m;
    EXPECT_EQ(1, unimem_hal_dest_closed(dest));
    EXPECT_EQ(-ENOENT, unimem_hal_dest_resolve(h.hal, &addr, &again)) << "known dest";
    unimem_hal_dest_release(dest);
}

// Wakeup: an armed mailbox raises its event fd at the next message, once; a mailbox with a
// message waiting refuses to arm; a disarmed one costs senders nothing.
TEST(UnimemHal, ArmedMailboxRaisesItsEventFdOnce)
{
    Hal h;
    Mbox m(h.hal, 16);
    unimem_hal_dest_t *dest = nullptr;
    unimem_msg_t msg = make_msg(0, 0), got[4];
    uint64_t count;
    int efd = unimem_hal_mbox_event_fd(m.mbox);

    ASSERT_GE(efd, 0);
    ASSERT_EQ(0, unimem_hal_dest_resolve(h.hal, &m.addr, &dest));
    auto readable = [efd]() {
        struct pollfd p = {efd, POLLIN, 0};
        return poll(&p, 1, 0) == 1;
    };

    ASSERT_EQ(0, unimem_hal_mbox_arm(m.mbox));
    EXPECT_FALSE(readable());
    ASSERT_EQ(0, unimem_hal_send(dest, &msg, 1));
    EXPECT_TRUE(readable()) << "the message raised the event fd";
    ASSERT_EQ(8, read(efd, &count, sizeof(count)));
    ASSERT_EQ(0, unimem_hal_send(dest, &msg, 1));
    EXPECT_FALSE(readable()) << "one raise per arm";
    EXPECT_EQ(-EBUSY, unimem_hal_mbox_arm(m.mbox)) << "messages wait: receive them first";
    EXPECT_EQ(2u, unimem_hal_mbox_recv(m.mbox, got, 4));
    ASSERT_EQ(0, unimem_hal_mbox_arm(m.mbox));
    unimem_hal_mbox_disarm(m.mbox);
    ASSERT_EQ(0, unimem_hal_send(dest, &msg, 1));
    EXPECT_FALSE(readable()) << "disarmed: the sender does not signal";
    EXPECT_EQ(1u, unimem_hal_mbox_recv(m.mbox, got, 4));
    unimem_hal_dest_release(dest);
}
