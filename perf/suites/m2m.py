"""perf/bench m2m: many-to-many multi-pair bandwidth ("MVAPICH with XRC: Early Experiences",
Panda, OFA 2007), MPI over two Soft-RoCE "hosts" in the verbs tier's qemu guest.

perf/mpi_m2m runs 2P ranks: ranks [0,P) are host A on rxe0 (veth0, 10.0.0.1), [P,2P) host B on
rxe1 (veth1, 10.0.0.2), so every A<->B message really crosses the veth pair; every A rank sends
a window of 64 messages to every B rank (P*P pairs) per iteration. Five transports alternate in
every repetition, each in its own MPI launch covering all sizes:

  rdmach          UCX_TLS=rdmach,ud_zcopy:aux,self   the project's RC verbs wire (preloaded)
  rc_verbs        UCX_TLS=rc_verbs,ud_verbs:aux,self stock UCX: the reference of the ratios
  ud_zcopy/udp    UCX_TLS=ud_zcopy,self on veth0 / veth1: the project's datagram transport on
                  its UDP wire
  ud_zcopy/ud     UCX_TLS=ud_zcopy,self on rxe0:1 / rxe1:1: the same transport on its
                  InfiniBand UD wire (perf/bench udz-ud has its one-pair figures)
  ud_verbs        UCX_TLS=ud_verbs,self              stock UCX's UD on the rxe ports

UCX_SHM_DEVICES= (empty: no shared-memory device) everywhere, so that nothing can fall back to
shared memory. Every run must prove that its transport carried the traffic, or the measurement
fails: mpi_m2m's own data check passed (PASS mpi_m2m); veth0 moved at least the payload bytes
mpi_m2m reports (tx+rx: A->B and B->A both pass it once); for the verbs transports the rxe ports
sent at least one packet per 4 KiB of payload; for rdmach and ud_zcopy their counter files
(mpi_glue/launch --counters) show that the transport carried it in every rank (ucp_ext/counters
--carried TL --ranks N), rdmach's with wire_posts>0 and wire_failures==0.

Run it in the guest, results copied back to the host:

  perf/bench m2m --in-guest [--quick] [--ppn N] [--impl mpich|openmpi|both]

Prints per MPI the median aggregate MB/s per size and transport, the ratio to rc_verbs (ratio
of the medians, and the spread of the per-repetition ratios), writes raw.csv, summary.csv,
m2m.png (bandwidth against size, log x) and meta.json. Soft-RoCE under qemu TCG is slow and
noisy in absolute terms: read the ratios.
"""

import datetime
import os
import statistics
import tempfile
import time

import counters

from benchlib import TOP, fmt_size, parse_sizes
from benchlib.env import Ctx, Transport, ucx_info, ext_preload, build_dir
from benchlib.guest import run_in_guest
from benchlib.mpi import find_perf_mpi, mpi_cmd
from benchlib.plots import errorbar_panel, pyplot, save
from benchlib.proc import MeasureError, log, run as run_cmd
from benchlib.stats import Recorder, rotated

NAME = "m2m"
HELP = "many-to-many multi-pair MPI bandwidth, rdmach/ud_zcopy vs rc_verbs/ud_verbs, 2 rxe hosts"
CONTENTION = False
TIMEOUT = (900, "seconds per MPI launch (all sizes of one transport)")
REPS_HELP = "repetitions (default 3, --quick 2)"

RANK_ENV = os.path.join(TOP, "tests", "verbs", "rank_env")
SIZES, QUICK_SIZES = "1K,16K,64K,256K,1M", "64K,1M"
REF = "rc_verbs"
HOSTS = (("rxe0", "veth0"), ("rxe1", "veth1"))   # host A, host B: Soft-RoCE device, netdev
# name: (UCX_TLS without self, ours (preloaded, counters), per-host UCX_NET_DEVICES, verbs)
CONFIGS = {
    "rdmach": ("rdmach,ud_zcopy:aux", True, ("rxe0:1,lo", "rxe1:1,lo"), True),
    "rc_verbs": ("rc_verbs,ud_verbs:aux", False, ("rxe0:1", "rxe1:1"), True),
    "ud_zcopy/udp": ("ud_zcopy", True, ("veth0", "veth1"), False),
    "ud_zcopy/ud": ("ud_zcopy", True, ("rxe0:1", "rxe1:1"), True),
    "ud_verbs": ("ud_verbs", False, ("rxe0:1", "rxe1:1"), True),
}
ORDER = list(CONFIGS)
COLORS = {"rdmach": "tab:red", "rc_verbs": "tab:blue", "ud_zcopy/udp": "tab:orange",
          "ud_zcopy/ud": "tab:purple", "ud_verbs": "tab:green"}
IMPLS = {"mpich": ["mpich"], "openmpi": ["openmpi"], "both": ["mpich", "openmpi"]}


def add_arguments(p):
    p.add_argument("--quick", action="store_true",
                   help="sizes %s and 2 repetitions" % QUICK_SIZES)
    p.add_argument("--in-guest", action="store_true",
                   help="boot the verbs tier's guest and run there (results to perf/results/)")
    p.add_argument("--ppn", type=int, default=2, choices=(1, 2, 3, 4),
                   help="ranks per host (default 2: 4 pairs)")
    p.add_argument("--impl", choices=sorted(IMPLS), default="mpich",
                   help="MPICH 4.0.2 ch4:ucx, Open MPI 4.1.4 pml ucx, or both (default mpich)")
    p.add_argument("--sizes", help="message sizes (default %s, --quick %s)" % (SIZES, QUICK_SIZES))
    p.add_argument("--window", type=int, default=64, help="messages in flight per pair (64)")
    p.add_argument("--bytes", default="64M",
                   help="bytes each sending rank moves per size and run (mpi_m2m -b, 64M)")
    p.add_argument("--bidir", action="store_true", help="both directions at once")
    p.add_argument("--only", help="comma-separated transports out of %s" % ",".join(ORDER))
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="more environment for every rank of every run (repeatable), e.g. a "
                   "transport's knob: UCX_RDMACH_* is read by rdmach only")
    p.add_argument("--mem", type=int, default=4096, help="guest memory in MB (--in-guest)")
    p.add_argument("--backlog", type=int, default=100000,
                   help="net.core.netdev_max_backlog in the guest (default 100000; 0: leave "
                   "the kernel's 1000): see raise_backlog")


# --- in the guest -------------------------------------------------------------------------

def stat(path):
    with open(path) as f:
        return int(f.read())


def wire_counters():
    """veth0's bytes and packets both ways, drops on both veth ends, and what both rxe ports
    sent and retransmitted (RC's retries show how hard the run pushed rdma_rxe)."""
    net = "/sys/class/net/%s/statistics/%s"

    def hw(c):
        return sum(stat("/sys/class/infiniband/%s/ports/1/hw_counters/%s" % (d, c))
                   for d, _ in HOSTS)
    return {"veth_bytes": stat(net % ("veth0", "tx_bytes")) + stat(net % ("veth0", "rx_bytes")),
            "veth_pkts": stat(net % ("veth0", "tx_packets")) + stat(net % ("veth0", "rx_packets")),
            "veth_dropped": sum(stat(net % (n, c)) for _, n in HOSTS
                                for c in ("tx_dropped", "rx_dropped")),
            "rxe_pkts": hw("sent_pkts"), "rxe_retries": hw("completer_retry_err"),
            "rxe_retry_exceeded": hw("retry_exceeded_err") + hw("retry_rnr_exceeded_err")}


def check_hosts():
    """The two hosts exist (else nothing here would measure what it claims)."""
    for d, n in HOSTS:
        if not (os.path.isdir("/sys/class/infiniband/" + d) and os.path.isdir("/sys/class/net/" + n)):
            raise SystemExit("m2m: no %s on %s here: run inside tests/verbs/guest (--in-guest)"
                             % (d, n))


def check_udz_devices(ctx, names):
    """ud_zcopy offers veth0 and veth1 as devices (ucx_info -d with the preload)."""
    if "ud_zcopy/udp" in names:
        devs, tl = [], None
        for l in ucx_info(ctx, ["-d"]).splitlines():
            if "Transport:" in l:
                tl = l.split(":", 1)[1].strip()
            elif "Device:" in l and tl == "ud_zcopy":
                devs.append(l.split(":", 1)[1].strip())
        ctx.meta["ud_zcopy_devices"] = devs
        log("m2m: ud_zcopy devices (ucx_info -d): %s" % " ".join(devs))
        if not {"veth0", "veth1"} <= set(devs):
            raise SystemExit("m2m: ud_zcopy does not offer veth0 and veth1 (%s)" % devs)


BACKLOG = "/proc/sys/net/core/netdev_max_backlog"


def raise_backlog(ctx, n):
    """A veth hands every packet to its peer's per-CPU backlog, 1000 packets by default. 64
    messages of 1 MiB in flight on 4 RC connections overflow it (veth tx_dropped), and rdma_rxe
    6.1 does not survive the retransmissions that follow: "Failed sending ACK", a WARN in
    rxe_completer (rxe_comp.c:756) and the QP in error, for UCX's rc_verbs as for rdmach
    (Endpoint timeout / Work Request Flushed). A lossless wire is what the test is about, so
    the guest's backlog is raised (only there: the guest's kernel is its own) and every run
    records veth_dropped."""
    if not n or os.uname().nodename != "verbs-guest":
        return
    with open(BACKLOG) as f:
        was = int(f.read())
    with open(BACKLOG, "w") as f:
        f.write(str(max(n, was)))
    ctx.meta["netdev_max_backlog"] = {"was": was, "now": max(n, was)}
    log("m2m: net.core.netdev_max_backlog %d -> %d" % (was, max(n, was)))


def transport(ctx, name, ppn, extra=()):
    """A benchlib Transport for mpi_cmd: the ranks' devices and the preload go through
    tests/verbs/rank_env (VERBS_NET_DEVICES_<rank>, VERBS_PRELOAD), so that the launcher runs
    with --no-preload and no shell in between loads the project's transports."""
    tls, ours, devs, _ = CONFIGS[name]
    env = {"UCX_SHM_DEVICES": "",
           # UCX 1.13.1's ud_verbs reads a RoCE packet's L3 type from the completion's sl,
           # which rdma_rxe leaves 0: with the IPv4 GID it drops everything (tests/README.md)
           "UCX_UD_VERBS_ETH_DGID_CHECK": "n"}
    for r in range(2 * ppn):
        env["VERBS_NET_DEVICES_%d" % r] = devs[r // ppn]
    if ours:
        env["VERBS_PRELOAD"] = ctx.preload
    env.update(kv.split("=", 1) for kv in extra)
    return Transport(name, tls, ours=False, extra_env=env)


def parse(out):
    """{size: (MB/s, msgs/s)} and the payload mpi_m2m says crossed between the hosts."""
    rows, total = {}, None
    for l in out.splitlines():
        f = l.split()
        if len(f) == 3 and f[0].isdigit():
            rows[int(f[0])] = (float(f[1]), float(f[2]))
        elif l.startswith("# bytes_total"):
            total = int(f[2])
    return rows, total


def one_run(ctx, name, impl, prog, args, timeout, rep):
    """One launch of mpi_m2m over one transport; returns ({size: (MB/s, msgs/s)}, proof dict)
    or raises MeasureError when it failed or cannot prove that its transport carried it."""
    tls, ours, _, verbs = CONFIGS[name]
    nranks = 2 * args.ppn
    cdir = tempfile.mkdtemp(prefix="m2m-counters-", dir="/tmp") if ours else None
    prog_args = [RANK_ENV, prog, "-s", ",".join(str(z) for z in args.size_list),
                 "-w", str(args.window), "-b", args.bytes,
                 # receive memory per rank: all ranks together stay under about 1 GiB
                 "-m", str((1 << 30) // nranks)] + (["--bidir"] if args.bidir else [])
    cmd, env = mpi_cmd(ctx, transport(ctx, name, args.ppn, args.env), prog_args, nranks=nranks,
                       counters=cdir, launch_timeout=int(timeout), impl=impl)
    w0, t0 = wire_counters(), time.time()
    rc, out, err = run_cmd(cmd, env, timeout + 30)
    w1, secs = wire_counters(), time.time() - t0
    rows, total = parse(out)
    proof = {k: w1[k] - w0[k] for k in w0}
    proof.update(seconds=round(secs, 1), payload_bytes=total or 0)
    os.makedirs(ctx.path("logs"), exist_ok=True)
    with open(ctx.path("logs/%d-%s-%s.log" % (rep, impl, name.replace("/", "-"))), "w") as f:
        f.write("$ %s\nrc=%s %s\n--- stdout\n%s\n--- stderr\n%s" % (
            " ".join(str(c) for c in cmd), rc, proof, out, err))
    why = []
    if rc != 0 or "PASS mpi_m2m" not in out:
        why.append("rc=%s%s" % ("timeout" if rc is None else rc,
                                "" if "PASS mpi_m2m" in out else ", no PASS mpi_m2m"))
    if not rows or not total:
        why.append("no figures")
    elif proof["veth_bytes"] < total:
        why.append("veth0 moved %d bytes < the payload %d: not across the two hosts"
                   % (proof["veth_bytes"], total))
    if verbs and total and proof["rxe_pkts"] < total // 4096:
        why.append("the rxe ports sent %d packets for %d payload bytes: not over verbs"
                   % (proof["rxe_pkts"], total))
    if ours:
        tl = name.split("/")[0]
        ok, msg = counters.carried(cdir, tl, ranks=nranks)
        proof["counters"] = msg
        if not ok:
            why.append(msg)
        if tl == "rdmach":
            bad = counters.check(counters.read(cdir), tl, "wire_posts>0,wire_failures==0")
            if bad:
                why.append("rdmach: " + "; ".join(bad))
    if why:
        raise MeasureError("%s: %s (%s) | %s" % (
            name, "; ".join(why), ", ".join("%s %s" % kv for kv in proof.items()
                                           if kv[0] != "counters"),
            (err.strip() or out.strip())[-600:]))
    return rows, proof


def measure(args):
    check_hosts()
    ctx = Ctx(args, NAME)
    args.size_list = parse_sizes(args.sizes or (QUICK_SIZES if args.quick else SIZES))
    reps = args.reps or (2 if args.quick else 3)
    names = [n for n in ORDER if not args.only or n in args.only.split(",")]
    impls = IMPLS[args.impl]
    check_udz_devices(ctx, names)
    raise_backlog(ctx, args.backlog)
    progs = {i: find_perf_mpi(ctx.build, "mpi_m2m", i) for i in impls}
    for i, p in progs.items():
        if not p:
            raise SystemExit("m2m: no mpi_m2m for %s (not built and mpicc failed)" % i)
    for kv in args.env:
        if "=" not in kv:
            raise SystemExit("m2m: --env wants NAME=VALUE, got %r" % kv)
    # the checkout the transports were built from, as far as it can tell (the snapshot in
    # meta.json has the libraries' sha256 and mtimes)
    rc, head, _ = run_cmd(["git", "-C", TOP, "log", "-1", "--format=%h %cI"], dict(os.environ), 30)
    rc2, dirty, _ = run_cmd(["git", "-C", TOP, "status", "--porcelain", "--", "uct"],
                            dict(os.environ), 30)
    ctx.meta["source"] = {"head": head.strip() if rc == 0 else "?",
                          "uct_modified": dirty.split("\n") if rc2 == 0 and dirty else []}
    ctx.meta.update(env=args.env, ppn=args.ppn, pairs=args.ppn ** 2, window=args.window, bidir=args.bidir,
                    sizes=args.size_list, reps=reps, bytes_per_sender=args.bytes,
                    programs=progs, configs={n: CONFIGS[n][:3] for n in names}, proofs=[])
    rec = Recorder()
    log("m2m: %d rep(s) x %s x %s, %d ranks per host (%d pairs), sizes %s" % (
        reps, "/".join(impls), "/".join(names), args.ppn, args.ppn ** 2,
        ",".join(fmt_size(z) for z in args.size_list)))
    k = 0
    for rep in range(reps):
        for impl in impls:
            for name in rotated(names, k):   # every transport first in turn
                try:
                    rows, proof = one_run(ctx, name, impl, progs[impl], args, args.timeout, rep)
                except MeasureError as e:
                    rec.errors.append("rep%d %s %s: %s" % (rep, impl, name, e))
                    log("m2m: FAILED rep %d %s %s: %s" % (rep, impl, name, e))
                    continue
                for z, (bw, mps) in rows.items():
                    rec.add(impl, z, name, rep, "bw_MBps", bw)
                    rec.add(impl, z, name, rep, "msgs_per_s", mps)
                for m in ("payload_bytes", "veth_bytes", "veth_pkts", "rxe_pkts", "seconds"):
                    rec.add(impl, 0, name, rep, m, proof[m])
                ctx.meta["proofs"].append(dict(proof, rep=rep, impl=impl, transport=name))
                log("m2m: rep %d %-7s %-12s %s  (%.0f s; veth %d MB, rxe %d pkts, %d retries)"
                    % (rep, impl, name, "  ".join("%s %.1f" % (fmt_size(z).replace(" ", ""), v[0])
                                                  for z, v in sorted(rows.items())),
                       proof["seconds"], proof["veth_bytes"] // 1000000, proof["rxe_pkts"],
                       proof["rxe_retries"]))
            k += 1
    rec.write_raw(ctx.path("raw.csv"))
    summarize(ctx, rec, impls, names, args, reps)
    plot(ctx, rec, impls, names, args)
    if rec.errors:
        print("\n%d run(s) FAILED (see meta.json 'errors'):" % len(rec.errors))
        for e in rec.errors:
            print("  " + e[:400])
    ctx.meta["errors"] = rec.errors
    ctx.finish()
    print("\nresults: %s (raw.csv, summary.csv, m2m.png, meta.json)" % ctx.out)
    return 1 if rec.errors else 0


def summarize(ctx, rec, impls, names, args, reps):
    rows = []
    for impl in impls:
        print("\n%s, %d ranks per host (%d pairs), %s, window %d: aggregate MB/s, medians of %d "
              "(higher is better); x vs rc_verbs = ratio of medians [per-repetition extremes]" % (
                  "MPICH 4.0.2" if impl == "mpich" else "Open MPI 4.1.4", args.ppn,
                  args.ppn ** 2, "bidirectional" if args.bidir else "A->B", args.window, reps))
        others = [n for n in names if n != REF]
        print("%-8s" % "size" + "".join("%14s" % n for n in names) +
              "".join("%26s" % ("%s vs %s" % (n, REF)) for n in others
                      if REF in names))
        for z in args.size_list:
            per = {n: {r["rep"]: r["value"] for r in rec.rows if r["section"] == impl and
                       r["size"] == z and r["transport"] == n and r["metric"] == "bw_MBps"}
                   for n in names}
            med = {n: statistics.median(v.values()) for n, v in per.items() if v}
            line = "%-8s" % fmt_size(z) + "".join(
                "%14s" % ("%.1f" % med[n] if n in med else "-") for n in names)
            for n in names:
                if n not in med:
                    continue
                ratio, lo, hi = None, None, None
                if n != REF and REF in med:
                    rr = [per[n][r] / per[REF][r] for r in per[n] if per[REF].get(r)]
                    ratio, lo, hi = med[n] / med[REF], min(rr or [0]), max(rr or [0])
                    line += "%26s" % ("%.2fx [%.2f-%.2f]" % (ratio, lo, hi))
                v = list(per[n].values())
                rows.append([impl, z, n, len(v), "%.3f" % med[n], "%.3f" % min(v),
                             "%.3f" % max(v)] + (["%.3f" % ratio, "%.3f" % lo, "%.3f" % hi]
                                                 if ratio else ["", "", ""]))
            print(line)
    with open(ctx.path("summary.csv"), "w") as f:
        f.write("impl,size,transport,n,median_MBps,min_MBps,max_MBps,ratio_vs_rc_verbs,"
                "ratio_min,ratio_max\n")
        for r in rows:
            f.write(",".join(str(x) for x in r) + "\n")


def plot(ctx, rec, impls, names, args):
    plt = pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(1, len(impls), figsize=(6.5 * len(impls), 4.5), squeeze=False)
    for ax, impl in zip(axes[0], impls):
        errorbar_panel(ax, rec, [(impl, "-", "")], "bw_MBps", names,
                       "%s: many-to-many, %d ranks per host (%d pairs)%s" % (
                           "MPICH" if impl == "mpich" else "Open MPI", args.ppn, args.ppn ** 2,
                           ", bidir" if args.bidir else ""), "MB/s", COLORS)
        ax.set_xticks(args.size_list)   # the measured sizes (size_axis has no 64 KiB tick)
        ax.set_xticklabels([fmt_size(z).replace(" ", "") for z in args.size_list], fontsize=8)
    fig.suptitle("Soft-RoCE rxe0 <-> rxe1 across a veth pair, qemu TCG (medians, quartiles)",
                 fontsize=9)
    save(plt, fig, ctx.path("m2m.png"))


# --- on the host --------------------------------------------------------------------------

def in_guest(args):
    """Builds what the guest needs on the host (the guest sees this root read-only), boots
    tests/verbs/guest with this suite inside and copies its results to perf/results/<name>."""
    build = build_dir(args)
    if not ext_preload(build):
        log("m2m: no project transports built under %s (--build or $UCXEXT_BUILD)" % build)
        return 2
    for impl in IMPLS[args.impl]:
        if not find_perf_mpi(build, "mpi_m2m", impl):
            log("m2m: cannot build mpi_m2m for %s" % impl)
            return 2
    name = args.out or "%s-%s%s" % (NAME, datetime.datetime.now().strftime("%Y%m%d-%H%M%S"),
                                     "-quick" if args.quick else "")
    fwd = ["--timeout", str(args.timeout), "--ppn", str(args.ppn),
           "--impl", args.impl, "--window", str(args.window), "--bytes", args.bytes,
           "--backlog", str(args.backlog)]
    for opt, val in (("--reps", args.reps), ("--sizes", args.sizes), ("--only", args.only)):
        if val:
            fwd += [opt, str(val)]
    for kv in args.env:
        fwd += ["--env", kv]
    fwd += ["--quick"] * args.quick + ["--bidir"] * args.bidir + ["--no-pin"] * args.no_pin
    return run_in_guest(NAME, name, fwd, timeout=7200, mem=args.mem, build=build)


def run(args):
    if args.in_guest:
        return in_guest(args)
    return measure(args)
