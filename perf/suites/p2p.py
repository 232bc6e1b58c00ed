"""perf/bench p2p: MPI point-to-point as users measure it (perf/mpi_p2p.c, the OSU
micro-benchmarks' pattern and defaults): one-way latency by ping-pong, bandwidth with a window of
64 non-blocking sends of one send buffer into one receive buffer and a 4-byte ack per window,
bi-directional bandwidth, under MPICH 4.0.2 (ch4:ucx) and Open MPI 4.1.4 (pml ucx), 2 ranks,
8 B to 4 MiB, alternating in one run with the built-in a user would otherwise pick: rdmach / sm
and unimem / sm (shared memory), ud_zcopy / tcp (loopback). bw-rot and bibw-rot are the same
with each receive of a window into its own buffer (window x size bytes, out of cache from 64 KiB
on), which is not OSU's pattern. --fresh adds lat-fresh: the ping-pong with each send buffer
written again before each send, outside the timed path (perf/mpi_p2p.c -d fresh), as an
application that computes what it sends; OSU's send buffer never changes, so its lines stay in
both cores' caches and a transport that reads it where it lies (cma) moves none of them. No
target is judged on it. --mbw adds multi-pair bandwidth (4 ranks: on 2 cores they share
them). --veth runs ud_zcopy / tcp across the veth between two namespace hosts
(tests/mpi/hosts.sh: one rank on each, the veth's 1500-byte MTU; needs root) instead of the
loopback pairs. Every value is kept twice: OSU's statistic (the mean over the timed iterations,
what osu_latency and osu_bw print) and the median (which leaves out a 2-core VM's preemption).
Prints per pair and size the medians over repetitions of each, and the ratio candidate /
baseline with the spread of the per-repetition ratios, and how many sizes meet the targets
(ud_zcopy: latency <= 0.9x tcp, bandwidth >= 1.0x; unimem: latency <= 1.0x sm; rdmach: latency
<= 0.9x sm, bandwidth >= 1.1x sm), judged on OSU's statistic in OSU's pattern. Every candidate
run's counters must show that its transport carried it. A core-to-core probe runs either side
of every launch (perf/core_to_core, in raw.csv): this VM's cache-line trip between its two
CPUs moves between 40-80 and 230-250 ns, sometimes from one launch to the next, and every
small message's latency with it; the tables add the ratio over the repetitions whose two
launches ran in one mode. Writes raw.csv, summary.csv, targets.csv, p2p-<mpi>.png and
meta.json.
"""

import os
import shutil
import statistics
import subprocess
import tempfile
import time

import counters

from benchlib.env import C2C_BURSTS, C2C_NEAR_NS, Ctx, c2c_mode, core_to_core_ns, same_mode_ratio
from benchlib.mpi import HOSTS_SH, hosts_launch, mpi_run_carried, p2p_args, parse_csv_rows, pinned
from benchlib.pairs import PAIRS, transports
from benchlib.plots import pyplot, save
from benchlib.proc import MeasureError, log, on_cleanup, run as run_cmd
from benchlib.report import write_csv
from benchlib.stats import alternating, cpu_stall_us, stall_fraction

NAME = "p2p"
HELP = "OSU-style MPI latency, bandwidth, bi-directional bandwidth vs sm and tcp, both MPIs"
CONTENTION = False
TIMEOUT = (300, "seconds per MPI launch")
SIZES = "8,64,512,2K,4K,16K,32K,64K,256K,1M,4M"
# (candidate, mode) -> (op, limit) of the targets
IMPLS = [("mpich", "MPICH 4.0.2 ch4:ucx"), ("openmpi", "Open MPI 4.1.4 pml ucx")]
VETH_NET = "10.213.9"
MODES = ["lat", "lat-fresh", "bw", "bibw", "bw-rot", "bibw-rot", "mbw"]   # --modes may pick
TARGETS = {("ud_zcopy", "lat"): ("<=", 0.9), ("ud_zcopy", "bw"): (">=", 1.0),
           ("unimem", "lat"): ("<=", 1.0), ("rdmach", "lat"): ("<=", 0.9),
           ("rdmach", "bw"): (">=", 1.1)}


def add_arguments(p):
    p.add_argument("--quick", action="store_true", help="3 repetitions, fewer iterations")
    p.add_argument("--only", help="candidates, comma-separated (default rdmach,unimem,ud_zcopy)")
    p.add_argument("--impl", choices=["mpich", "openmpi", "both"], default="both")
    p.add_argument("--sizes", default=SIZES, help="message sizes (default %s)" % SIZES)
    p.add_argument("--mbw", action="store_true", help="also multi-pair bandwidth, 4 ranks")
    p.add_argument("--fresh", action="store_true", help="also lat-fresh: the ping-pong with the "
                   "send buffer written again before each send")
    p.add_argument("--modes", help="only these modes, comma-separated (of lat, lat-fresh, bw, "
                   "bibw, bw-rot, bibw-rot, mbw; default all that the flags give)")
    p.add_argument("--veth", action="store_true", help="ud_zcopy / tcp across the veth between "
                   "two namespace hosts, one rank each (needs root), instead of loopback")


def veth_run_carried(ctx, t, prog_args, timeout, impl, prefix):
    """(rc, stdout, stderr) of 2 ranks, one on each namespace host of prefix, over t across
    the veth; a project transport must show on both hosts that it carried the run."""
    cdir = tempfile.mkdtemp(prefix="bench-p2p-veth.")
    try:
        cmd = hosts_launch(impl, t.tls, prefix, 1, VETH_NET, timeout)
        if t.ours:
            cmd += ["--env", "LD_PRELOAD=" + ctx.preload, "--counters",
                    os.path.join(cdir, "%h")]
        for k, v in t.extra_env.items():
            cmd += ["--env", "%s=%s" % (k, v)]
        prog_args = pinned(ctx, prog_args)
        env = dict(os.environ, UCXEXT_BUILD=ctx.build)
        env.pop("LD_PRELOAD", None)
        rc, out, err = run_cmd(cmd + ["--"] + prog_args, env, timeout + 30)
        if t.ours and rc == 0:
            for h in "ab":
                ok, note = counters.carried(os.path.join(cdir, "%s-%s" % (prefix, h)), t.tls,
                                            ranks=1)
                if not ok:
                    raise MeasureError("%s did not carry the run on %s-%s: %s"
                                       % (t.name, prefix, h, note))
        return rc, out, err
    finally:
        shutil.rmtree(cdir, ignore_errors=True)


def measure(ctx, t, impl, mode, sizes, quick, timeout, veth=None):
    prog = os.path.join(ctx.build, "perf", "mpi_p2p." + ("ompi" if impl == "openmpi" else "mpich"))
    # OSU's iterations per size class unless quick
    lat = mode.startswith("lat")
    iters = ["-i", "300" if lat else "30"] if quick else []
    args = p2p_args(prog, mode, sizes) + iters
    if veth:
        rc, out, err = veth_run_carried(ctx, t, args, timeout, impl, veth)
    else:
        rc, out, err = mpi_run_carried(ctx, t, args, timeout, impl=impl,
                                       nranks=4 if mode == "mbw" else 2)
    rows = parse_csv_rows(out, "mode")
    if rc != 0 or not rows:
        raise MeasureError("%s %s %s: rc=%s %s" % (impl, t.name, mode, rc,
                                                  (err.strip() or out.strip())[-400:]))
    if lat:
        return {int(r["bytes"]): (float(r["lat_us_mean"]), float(r["lat_us_median"]))
                for r in rows}
    return {int(r["bytes"]): (float(r["bw_MBps_mean"]), float(r["bw_MBps"])) for r in rows}


def run(args):
    reps = args.reps or (3 if args.quick else 5)
    only = args.only.split(",") if args.only else None
    pairs = [p for p in PAIRS if (only is None or p[0].name in only) and
             (not args.veth or p[1].name == "tcp")]
    impls = [i for i in IMPLS if args.impl in ("both", i[0])]
    modes = ["lat"] + (["lat-fresh"] if args.fresh else []) + ["bw", "bibw"] + \
        ([] if args.veth else ["bw-rot", "bibw-rot"]) + \
        (["mbw"] if args.mbw and not args.veth else [])
    if args.modes:
        asked = args.modes.split(",")
        unknown = set(asked) - set(MODES)
        if unknown or (args.veth and set(asked) & {"bw-rot", "bibw-rot", "mbw"}):
            log("bench p2p: --modes: %s not a mode here" % ",".join(sorted(unknown) or asked))
            return 2
        modes = asked
    veth = None
    if args.veth:
        if os.geteuid() != 0:
            log("bench p2p --veth: needs root (network namespaces)")
            return 2
        veth = "benchv%d" % os.getpid()
        subprocess.call([HOSTS_SH, "reap", "benchv"])
        if subprocess.call([HOSTS_SH, "up", veth, VETH_NET]) != 0:
            log("bench p2p --veth: could not make the two hosts")
            return 1
        on_cleanup(lambda: subprocess.call([HOSTS_SH, "down", veth]))
    ctx = Ctx(args, NAME)
    ctx.meta["link"] = "veth between two namespace hosts" if veth else "loopback / shared memory"
    who = transports(pairs)
    raw = []
    load0, stall0, t0 = os.getloadavg()[0], cpu_stall_us(), time.time()
    c2c = core_to_core_ns(ctx.build, C2C_BURSTS)
    for rep, impl, _, mode, t in alternating(reps, impls, modes, who):
        c2c_before = c2c
        try:
            vals = measure(ctx, t, impl, mode, args.sizes, args.quick, args.timeout, veth)
        except MeasureError as e:
            log("bench p2p: %s" % e)
            continue
        finally:
            c2c = core_to_core_ns(ctx.build, C2C_BURSTS)
        raw += [(rep, impl, mode, size, t.name, v[0], v[1], c2c_before, c2c)
                for size, v in vals.items()]
        log("bench p2p: rep %d/%d %-7s %-4s %-8s done" % (rep + 1, reps, impl, mode, t.name))
    if veth:
        subprocess.call([HOSTS_SH, "down", veth])
    elapsed = time.time() - t0
    stall = stall_fraction(stall0, cpu_stall_us(), elapsed)
    write_csv(ctx.path("raw.csv"), "rep,impl,mode,bytes,transport,value_mean,value_median,"
              "c2c_before_ns,c2c_after_ns",
              [(r, i, m, s, n, "%.4f" % v, "%.4f" % md, fmt_ns(c0), fmt_ns(c1))
               for r, i, m, s, n, v, md, c0, c1 in raw])
    summary = summarize(ctx, raw, pairs, impls, modes)
    targets = check_targets(ctx, summary)
    pngs = [plot(ctx, summary, impl, title, modes) for impl, title in impls]
    ctx.meta.update({"reps": reps, "png": pngs, "elapsed_s": round(elapsed, 1),
                     "loadavg_before": load0, "loadavg_after": os.getloadavg()[0],
                     "cpu_pressure_some_pct": None if stall is None else round(100 * stall, 1)})
    print_tables(summary, impls, reps, targets, ctx.meta["link"])
    ctx.finish()
    print("results: %s" % ctx.out)
    return 0


def fmt_ns(v):
    return "" if v is None else "%.1f" % v


def same_mode(vals, cand, base):
    """The repetitions whose candidate and baseline launches both ran in one mode of the VM
    (same_mode_ratio): the median of their per-repetition ratios of OSU's statistic, how many,
    and how many of those in the near mode."""
    per = []
    for rep in {k[0] for k in vals}:
        c, b = vals.get((rep, cand)), vals.get((rep, base))
        if c is not None and b is not None and b[0] > 0:
            per.append((c[0] / b[0], c2c_mode(c[2], c[3]), c2c_mode(b[2], b[3])))
    return same_mode_ratio(per)


def summarize(ctx, raw, pairs, impls, modes):
    """[(impl, mode, size, cand, base, cand mean, base mean, ratio, lo, hi, cand median,
    base median, median ratio, same-mode ratio, its repetitions, those near)]: the ratio of
    OSU's statistic (the mean) with its per-repetition range, the ratio of the medians, and
    the ratio over the repetitions whose two launches ran in one mode of the VM (same_mode:
    a 2-vCPU VM whose core-to-core latency moves between 40-80 and 230-250 ns moves every
    small message's latency with it, for one launch and not the next)."""
    out = []
    sizes = sorted({r[3] for r in raw})
    for impl, _ in impls:
        for mode in modes:
            for size in sizes:
                vals = {(r[0], r[4]): (r[5], r[6], r[7], r[8]) for r in raw
                        if r[1] == impl and r[2] == mode and r[3] == size}
                for cand, base in pairs:
                    c = [v for (rep, n), v in vals.items() if n == cand.name]
                    b = [v for (rep, n), v in vals.items() if n == base.name]
                    per = [vals[(rep, cand.name)][0] / vals[(rep, base.name)][0]
                           for rep in {k[0] for k in vals}
                           if (rep, cand.name) in vals and (rep, base.name) in vals and
                           vals[(rep, base.name)][0] > 0]
                    if not c or not b or not per:
                        continue
                    mc = statistics.median(v[0] for v in c)
                    mb = statistics.median(v[0] for v in b)
                    dc = statistics.median(v[1] for v in c)
                    db = statistics.median(v[1] for v in b)
                    out.append((impl, mode, size, cand.name, base.name, mc, mb, mc / mb,
                                min(per), max(per), dc, db, dc / db if db > 0 else 0.0) +
                               same_mode(vals, cand.name, base.name))
    write_csv(ctx.path("summary.csv"), "impl,mode,bytes,candidate,baseline,candidate_mean,"
              "baseline_mean,ratio,ratio_min,ratio_max,candidate_median,baseline_median,"
              "median_ratio,same_mode_ratio,same_mode_reps,same_mode_near",
              [s[:5] + tuple("%.4f" % x for x in s[5:13]) +
               ("" if s[13] is None else "%.4f" % s[13], s[14], s[15]) for s in out])
    return out


def check_targets(ctx, summary):
    """Per MPI, candidate and mode with a target: the sizes that meet it, of those measured."""
    rows = []
    for impl in sorted({s[0] for s in summary}):
        for (cand, mode), (op, lim) in TARGETS.items():
            # OSU's pattern (one receive buffer) and statistic (the mean)
            got = [s for s in summary if s[0] == impl and s[3] == cand and s[1] == mode]
            if not got:
                continue
            met = [s for s in got if (s[7] <= lim if op == "<=" else s[7] >= lim)]
            missed = ",".join(str(s[2]) for s in got if s not in met)
            rows.append((impl, cand, mode, op, lim, len(met), len(got), missed))
    write_csv(ctx.path("targets.csv"), "impl,candidate,mode,op,limit,sizes_met,sizes,missed",
              [r[:4] + ("%g" % r[4],) + r[5:] for r in rows])
    return rows


def print_tables(summary, impls, reps, targets, link):
    unit = {"lat": "us", "lat-fresh": "us", "bw": "MB/s", "bibw": "MB/s", "mbw": "MB/s",
            "bw-rot": "MB/s", "bibw-rot": "MB/s"}
    print("\nMPI point-to-point, 2 ranks, %s (OSU's statistic, the mean over iterations, as "
          "medians of %d alternating runs; ratio = candidate / baseline, [per-repetition "
          "range]; the ratio of the medians over iterations next to it; same mode: the "
          "median ratio over the repetitions whose two launches ran in one core-to-core mode "
          "of the VM, how many and how many of them near (< %.0f ns); latency lower is "
          "better, bandwidth higher; -rot: each receive of a window into its own buffer; "
          "lat-fresh: the send buffer written again before each send)"
          % (link, reps, C2C_NEAR_NS))
    for impl, title in impls:
        print("\n%s" % title)
        print("%-8s %8s %-9s %12s %12s %8s %15s %9s %17s" % (
            "mode", "bytes", "pair", "candidate", "baseline", "ratio", "[range]", "median",
            "same mode (n/near)"))
        for s in summary:
            if s[0] == impl:
                print("%-8s %8d %-9s %12.3f %12.3f %7.2fx %15s %8.2fx %17s" % (
                    s[1], s[2], s[3], s[5], s[6], s[7], "[%.2f-%.2f]" % (s[8], s[9]), s[12],
                    "-" if s[13] is None else "%.2fx (%d/%d)" % (s[13], s[14], s[15])))
        print("(%s)" % ", ".join(sorted({unit[s[1]] + " " + s[1] for s in summary})))
    print("\ntargets (sizes meeting them):")
    for impl, cand, mode, op, lim, met, n, missed in targets:
        print("  %-8s %-9s %-4s %s %.1fx: %d of %d%s" % (impl, cand, mode, op, lim, met, n,
                                                      (", missed at " + missed) if missed else ""))


def plot(ctx, summary, impl, title, modes):
    plt = pyplot()
    rows = [s for s in summary if s[0] == impl]
    if plt is None or not rows:
        return None
    fig, axes = plt.subplots(1, len(modes), figsize=(4.2 * len(modes), 3.8), squeeze=False)
    for ax, mode in zip(axes[0], modes):
        for cand in sorted({s[3] for s in rows}):
            pts = sorted((s[2], s[7], s[8], s[9], s[4]) for s in rows
                         if s[1] == mode and s[3] == cand)
            if not pts:
                continue
            ax.errorbar([p[0] for p in pts], [p[1] for p in pts],
                        # the ratio of medians can lie outside the per-repetition range
                        # when a baseline run failed (unpaired repetitions): clamp
                        yerr=[[max(0.0, p[1] - p[2]) for p in pts],
                              [max(0.0, p[3] - p[1]) for p in pts]],
                        marker="o", ms=3, capsize=2, label="%s / %s" % (cand, pts[0][4]))
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_title("%s (%s)" % (mode, "lower is better" if mode.startswith("lat") else
                                  "higher is better"), fontsize=9)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("candidate / baseline")
    fig.suptitle("%s: point-to-point, medians and per-repetition range" % title, fontsize=10)
    return save(plt, fig, ctx.path("p2p-%s.png" % impl))
