"""perf/bench udz-ud: ud_zcopy over its InfiniBand UD wire against UCX's ud_verbs and rc_verbs
(with ud_verbs as the auxiliary wireup transport) on the same verbs port, Soft-RoCE rxe0:1 in
the verbs tier's qemu guest, alternating, same run. Koop, Sur and Panda's claim is zero-copy
bandwidth within 9% of RC from 64 KiB, over a transport whose memory does not grow with the
peers.

  perf/bench udz-ud --in-guest [--quick] [--reps N] [--mtu 9000]

Figures:
  UCT (ucx_perftest -x TL -d rxe0:1):  am_lat 8 B
  UCP (UCX_TLS=TL, shm devices off):   tag_lat 8 B, tag_bw 64 KiB, 1 MiB and 16 MiB
                                       (rendezvous: ud_zcopy's zero-copy channels, RC's
                                       RDMA, ud_verbs' copied UD datagrams)
  MPI, as users measure it (mpi = MPICH 4.0.2 ch4:ucx, ompi = Open MPI 4.1.4):
       tests/mpi/pingpong               latency 8 B, ping-pong bandwidth 64 KiB and 1 MiB
       perf/mpi_rotbuf (MPICH)         windowed bandwidth (16 in flight) 64 KiB and 1 MiB
  Memory per endpoint (perf/ep_memory: one process with endpoints to N peer workers),
       2 to 256 peers.
  The wire's ceiling (rdma-core's perftest, raw verbs, no UCX): ib_send_bw over UD with
       messages of the path MTU (one chunk a datagram, as ud_zcopy's channels) against
       ib_read_bw over RC with 1 MiB, alternating; what Soft-RoCE itself gives a UD stream
       next to RC's RDMA read, whatever a transport above it does.
Prints medians and the ratios ud_zcopy / ud_verbs and ud_zcopy / rc_verbs with the spread of
the per-repetition ratios (latency: lower is better; bandwidth: higher); writes raw.csv,
summary.csv, memory.csv and ratios.png. ud_zcopy's counters prove its UD wire carried every
UCP/MPI figure (ud_sends), and its channels the bandwidth ones (chan_zc_dgrams).
Soft-RoCE under TCG is slow and noisy in absolute terms: read the ratios.
"""

import csv
import os
import re
import shutil
import statistics
import tempfile
import time

import counters

from benchlib import epmem, fmt_size
from benchlib.env import build_dir, Ctx, Transport
from benchlib.guest import run_in_guest
from benchlib.plots import pyplot, save
from benchlib.proc import MeasureError, log, run as run_cmd, spawn, stop
from benchlib.stats import Recorder
from benchlib.verbsfig import MPI_KINDS, campaign, one, paired_table

NAME = "udz-ud"
HELP = "ud_zcopy's UD verbs wire vs ud_verbs and rc_verbs on a verbs port (Soft-RoCE, guest)"
CONTENTION = False
TIMEOUT = (180, "seconds per ucx_perftest client run")

DEV = "rxe0:1"
OURS = "ud_zcopy"
REFS = ("ud_verbs", "rc_verbs")
FIGURES = [
    ("uct", "am_lat", 8, []),
    ("ucp", "tag_lat", 8, []), ("ucp", "tag_bw", 65536, []), ("ucp", "tag_bw", 1 << 20, []),
    ("ucp", "tag_bw", 16 << 20, []),
    ("mpi", "pingpong_lat", 8, []), ("mpi", "pingpong_bw", 65536, []),
    ("mpi", "pingpong_bw", 1 << 20, []),
    ("mpi", "window_bw", 65536, []), ("mpi", "window_bw", 1 << 20, []),
    ("ompi", "pingpong_lat", 8, []), ("ompi", "pingpong_bw", 1 << 20, []),
]
ZC_FIGURES = {("ucp", "tag_bw"), ("mpi", "pingpong_bw"), ("mpi", "window_bw"),
              ("ompi", "pingpong_bw")}


def add_arguments(p):
    p.add_argument("--quick", action="store_true",
                   help="3 repetitions, fewer iterations, memory at 2, 16 and 64 peers")
    p.add_argument("--in-guest", action="store_true",
                   help="boot the verbs tier's guest and run there (results to --out on the host)")
    p.add_argument("--peers", help="peer counts of the memory table (default 2,16,64,256)")
    p.add_argument("--mtu", type=int,
                   help="the guest's veth MTU (default 1500: rxe's path MTU 1024; 9000: jumbo "
                        "frames, rxe's 4096, as RoCE fabrics usually run)")


def transports():
    # UCX 1.13.1's ud_verbs reads a RoCE packet's L3 type from the completion's sl, which
    # rdma_rxe leaves 0: without this it drops every packet on rxe's IPv4 GID
    env = {"UCX_NET_DEVICES": DEV, "UCX_SHM_DEVICES": "", "UCX_WARN_UNUSED_ENV_VARS": "n",
           "UCX_UD_VERBS_ETH_DGID_CHECK": "n"}
    return [Transport(OURS, OURS, (OURS, DEV), ours=True, extra_env=dict(env)),
            Transport("ud_verbs", "ud_verbs", ("ud_verbs", DEV), extra_env=dict(env)),
            Transport("rc_verbs", "rc_verbs,ud_verbs:aux", ("rc_verbs", DEV),
                      extra_env=dict(env))]


def one_counted(ctx, t, kind, test, size, extra, quick, timeout, rep, cdir):
    """One figure for one transport; ud_zcopy's counters go to cdir (an MPI figure's ranks get
    them through launch --env)."""
    if t.ours:
        t.extra_env["UCX_EXT_COUNTERS_DIR"] = cdir
    n = (10 if quick else 30) if (kind not in MPI_KINDS and size >= (16 << 20)) else None
    return one(ctx, t, kind, test, size, extra, quick, timeout, rep, n=n, warmup_min=2)


def carried(cdir, kind, test):
    """ud_zcopy's counter files of one figure: its UD wire carried it (and, for bandwidth,
    its zero-copy channels). An error message, or None."""
    if kind == "uct":
        return None     # ucx_perftest -x ud_zcopy -d rxe0:1 can only be the UD wire
    c = counters.sums(cdir, OURS)
    if not c:
        return "no ud_zcopy counter files"
    if c.get("ud_sends", 0) <= 0:
        return "ud_sends is 0: the UD wire carried nothing"
    if (kind, test) in ZC_FIGURES and c.get("chan_zc_dgrams", 0) <= 0:
        return "chan_zc_dgrams is 0: no chunk came through a zero-copy channel"
    return None


def run(args):
    if args.in_guest:
        return run_in_guest(NAME, args.out or NAME,
                            (["--quick"] if args.quick else []) +
                            (["--reps", str(args.reps)] if args.reps else []) +
                            (["--peers", args.peers] if args.peers else []), timeout=7200,
                            mtu=args.mtu, build=build_dir(args))
    ctx = Ctx(args, NAME)
    reps = args.reps or (3 if args.quick else 5)
    who = transports()
    errors = []

    def measure(t, rep, kind, test, size, extra):
        # ud_zcopy's own counters must show its UD wire carried the figure, or it is left out
        cdir = tempfile.mkdtemp(prefix="udz-ud-cnt-")
        try:
            v = one_counted(ctx, t, kind, test, size, extra, args.quick, args.timeout, rep,
                            cdir)
            bad = carried(cdir, kind, test) if t.ours else None
        finally:
            if t.ours:
                t.extra_env.pop("UCX_EXT_COUNTERS_DIR", None)
            shutil.rmtree(cdir, ignore_errors=True)
        if bad:
            errors.append("%s %s %s rep %d: %s" % (kind, test, fmt_size(size), rep, bad))
            raise MeasureError("NOT COUNTED: " + bad)
        return v
    raw = campaign(ctx, "udz-ud", FIGURES, who, reps, measure)
    header, rows, missing = paired_table(raw, reps, FIGURES, OURS, REFS)
    errors += ["no value: " + m for m in missing]
    with open(ctx.path("summary.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    plot(ctx, rows)
    ceiling(ctx, reps, args.quick)
    peers = [int(p) for p in (args.peers or ("2,16,64" if args.quick else "2,16,64,256"))
             .split(",")]
    rec = Recorder()
    names = epmem.measure(ctx, args, [(t, {}) for t in who], peers, rec)
    epmem.report(ctx, rec, names)
    for e in errors + rec.errors:
        print("ERROR: " + e)
    ctx.finish()
    print("results: %s" % ctx.out)
    return 1 if errors else 0


# (name, perftest program and arguments): UD on the first RoCE v2 GID (the one ud_zcopy picks,
# gid 0 in the guest) with messages of the path MTU (ud_send_mtu), RC on the IPv4 one (the
# one UCX's rc_verbs picks, gid 1)
CEILING = [("ud_send_mtu", ["ib_send_bw", "-c", "UD", "-x", "0"], 20000),
           ("rc_read_1m", ["ib_read_bw", "-s", str(1 << 20), "-x", "1"], 200)]


def rxe_path_mtu(dev="rxe0"):
    """The port's active MTU in bytes (1024 when it cannot be read)."""
    rc, out, _ = run_cmd(["ibv_devinfo", "-d", dev], dict(os.environ), 30)
    m = re.search(r"active_mtu:\s*(\d+)", out or "")
    return int(m.group(1)) if m else 1024
PERFTEST_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s")


def perftest_bw(cmd, n, timeout=120, port=18515):
    """BW average (MB/s) of one perftest pair over rxe0's loopback, or None."""
    env = dict(os.environ)
    base = cmd + ["-d", "rxe0", "-n", str(n), "-F", "-p", str(port)]
    srv = spawn(base, env)
    try:
        time.sleep(1.5)
        rc, out, err = run_cmd(base + ["127.0.0.1"], env, timeout)
    finally:
        stop(srv)
    for line in out.splitlines():
        m = PERFTEST_ROW.match(line)
        if m:
            return float(m.group(4))
    log("udz-ud: %s: no result (rc %s): %s" % (" ".join(cmd), rc, (err or out)[-300:]))
    return None


def ceiling(ctx, reps, quick):
    """The raw verbs ceiling: UD SEND of 1 KiB against RC READ of 1 MiB, alternating."""
    if shutil.which("ib_send_bw") is None:
        log("udz-ud: no ib_send_bw (Debian's perftest): the wire ceiling is not measured")
        return
    vals = {name: [] for name, _, _ in CEILING}
    ratios = []
    mtu = rxe_path_mtu()
    for rep in range(reps):
        got = {}
        for name, cmd, n in (CEILING if rep % 2 == 0 else CEILING[::-1]):
            if name == "ud_send_mtu":
                cmd = cmd + ["-s", str(mtu)]
            got[name] = perftest_bw(cmd, n // 2 if quick else n)
            if got[name] is not None:
                vals[name].append(got[name])
        if got.get("ud_send_mtu") and got.get("rc_read_1m"):
            ratios.append(got["ud_send_mtu"] / got["rc_read_1m"])
    with open(ctx.path("ceiling.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["test", "median_MBps", "reps"])
        for name, _, _ in CEILING:
            if vals[name]:
                w.writerow([name, "%.3f" % statistics.median(vals[name]), len(vals[name])])
    if ratios:
        print("\nwire ceiling (raw verbs, perftest): UD SEND %d B %.2f MB/s, RC READ 1 MiB "
              "%.2f MB/s: UD/RC %.2fx [%.2f-%.2f]" % (
                  mtu, statistics.median(vals["ud_send_mtu"]),
                  statistics.median(vals["rc_read_1m"]),
                  statistics.median(ratios), min(ratios), max(ratios)))


def plot(ctx, rows):
    plt = pyplot()
    if plt is None or not rows:
        return
    fig, ax = plt.subplots(figsize=(8, 1.5 + 0.4 * len(rows)))
    labels = ["%s %s %s" % (r[0], r[1], fmt_size(int(r[2]))) for r in rows]
    y = range(len(rows))
    for k, (ref, color) in enumerate(zip(REFS, ("#228833", "#4477aa"))):
        vals = [float(r[7 + k]) if r[7 + k] else 0 for r in rows]
        ax.barh([p + 0.4 * k for p in y], vals, height=0.4, color=color,
                label="ud_zcopy / %s" % ref)
    ax.set_yticks([p + 0.2 for p in y])
    ax.set_yticklabels(labels)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.axvline(0.91, color="gray", lw=0.8, ls="--")
    ax.set_xlabel("ratio (latency: lower is better; bandwidth: higher; dashed: 0.91, the "
                  "paper's RC mark)")
    ax.set_title("ud_zcopy UD wire vs ud_verbs and rc_verbs, Soft-RoCE under qemu TCG\n"
                 "(medians of alternating repetitions)", fontsize=10)
    ax.legend(fontsize=8)
    save(plt, fig, ctx.path("ratios.png"))
