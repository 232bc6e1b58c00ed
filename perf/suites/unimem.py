"""perf/bench unimem: the UnimemMPI paper's table (ExaNeSt) on this machine, same run.

MPI ping-pong (Debian MPICH 4.0.2 ch4:ucx, tests/mpi/pingpong, 2 ranks) over
  unimem       UCX_TLS=unimem,self  (the emulated ExaNeSt HAL; preloaded from the build)
  posix,cma    UCX_TLS=posix,cma,self (UCX's shared memory + CMA rendezvous)
  tcp          UCX_TLS=tcp,self     (the paper's "MPICH over TCP sockets")
at 8 B and 4096 B (latency: half the round trip, median over the iterations of a run; rank r
pinned to CPU r unless --no-pin), and a bandwidth sweep up to 4 MiB (size / median one-way
latency). Transports alternate in a rotated order on every repetition; figures are medians over
repetitions, and ratios both of those medians and, per repetition, between transports measured
back to back (median of those). Every unimem run must show in its counter files
(ucp_ext/counters --carried) that unimem carried the traffic. Writes raw.csv, summary.csv,
targets.csv, unimem.png and meta.json and prints the table. Targets: unimem >= 10x lower
latency than tcp at 8 B, and within 1.5x of posix,cma at 8 B.
"""

import os
import shutil
import statistics
import tempfile
import time

import counters

from benchlib import fmt_size
from benchlib.env import STOCK, Ctx, Transport
from benchlib.mpi import find_pingpong, mpi_cmd, parse_csv_rows
from benchlib.plots import pyplot, save
from benchlib.report import print_checks, write_csv
from benchlib.proc import MeasureError, log, run as run_cmd
from benchlib.stats import cpu_stall_us, rotated, stall_fraction

NAME = "unimem"
HELP = "unimem vs posix,cma vs tcp: the UnimemMPI table, MPI ping-pong 8 B / 4 KiB and bandwidth"
CONTENTION = False  # one contention figure for the whole run (below the table)
TIMEOUT = (90, "seconds per MPI launch (default 90)")
REPS_HELP = "repetitions (default 7, --quick 3)"
TRANSPORTS = [Transport("unimem", "unimem", ours=True), STOCK["posix,cma"], STOCK["tcp"]]
LAT_SIZES = [8, 4096]
BW_SIZES = [8, 64, 512, 4096, 16384, 65536, 262144, 1 << 20, 4 << 20]
PAPER_TABLE = {8: (12.5, 279.6), 4096: (46.0, 1207.1)}   # UnimemMPI, MPICH over TCP (usec)


def add_arguments(p):
    p.add_argument("--quick", action="store_true", help="3 repetitions, fewer iterations")
    p.add_argument("--lat-iters", type=int, default=None,
                   help="round trips per latency run (default 20000, quick 5000)")


def run_pingpong(ctx, t, sizes, iters, timeout):
    """One MPICH run of pingpong over t; returns ({size: row}, counter note)."""
    cdir = tempfile.mkdtemp(prefix="bench-unimem-cnt.")
    try:
        args = [ctx.meta["pingpong"], "-s", ",".join(str(s) for s in sizes), "--csv", "-"]
        cmd, env = mpi_cmd(ctx, t, args + (["-i", str(iters)] if iters else []),
                           counters=cdir if t.ours else None, launch_timeout=int(timeout))
        rc, out, err = run_cmd(cmd, env, timeout + 30)
        rows = parse_csv_rows(out, "bytes")
        if rc != 0 and "PASS pingpong" in out and len(rows) == len(sizes):
            # every size measured and checked, then the run did not end: stock MPICH over tcp
            # sometimes hangs in MPI_Finalize (perf/README.md, "perf/bench unimem"); the
            # figures stand
            log("bench unimem: %s: measured, but the run did not exit (rc %s): kept" % (t.name, rc))
        elif rc != 0 or "PASS pingpong" not in out or len(rows) != len(sizes):
            raise MeasureError("%s: rc=%s %s" % (t.name, rc, (err.strip() or out.strip())[-600:]))
        note = ""
        if t.ours:
            ok, note = counters.carried(cdir, t.tls, ranks=2)
            if not ok:
                raise MeasureError("unimem did not carry the traffic: " + note)
        return {int(r["bytes"]): r for r in rows}, note
    finally:
        shutil.rmtree(cdir, ignore_errors=True)


def run(args):
    reps = args.reps or (3 if args.quick else 7)
    lat_iters = args.lat_iters or (5000 if args.quick else 20000)
    bw_iters = 100 if args.quick else 300
    ctx = Ctx(args, "unimem", only=["unimem"])
    ctx.meta["pingpong"] = find_pingpong(ctx)
    lib = os.path.join(ctx.build, "uct", "libuct_unimem.so")
    for f in (lib, ctx.meta["pingpong"] or os.path.join(ctx.build, "tests", "mpi", "pingpong.mpich")):
        if not os.path.exists(f):
            ctx.discard()
            log("bench unimem: %s not built (scripts/build with UCXEXT_BUILD=%s)" % (f, ctx.build))
            return 2
    load0, stall0, t0 = os.getloadavg()[0], cpu_stall_us(), time.time()
    raw, notes = [], []
    for rep in range(reps):
        for t in rotated(TRANSPORTS, rep):
            for kind, sizes, iters in (("lat", LAT_SIZES, lat_iters), ("bw", BW_SIZES, bw_iters)):
                log("bench unimem: rep %d/%d %-9s %s" % (rep + 1, reps, t.name, kind))
                try:
                    rows, note = run_pingpong(ctx, t, sizes, iters, args.timeout)
                except MeasureError as e:
                    log("bench unimem: FAILED %s" % e)
                    return 1
                if note:
                    notes.append(note)
                for s in sizes:
                    r = rows[s]
                    raw.append({"rep": rep, "tl": t.name, "kind": kind, "bytes": s,
                                "iters": int(r["iters"]), "lat_us": r["lat_us_median"],
                                "lat_us_min": r["lat_us_min"], "bw_MBps": r["bw_MBps"]})
    elapsed = time.time() - t0
    stall = stall_fraction(stall0, cpu_stall_us(), elapsed)
    write_csv(ctx.path("raw.csv"), "rep,tl,kind,bytes,iters,lat_us,lat_us_min,bw_MBps",
              [(r["rep"], r["tl"], r["kind"], r["bytes"], r["iters"], "%.4f" % r["lat_us"],
                "%.4f" % r["lat_us_min"], "%.2f" % r["bw_MBps"]) for r in raw])
    summary = summarize(ctx, raw)
    targets = check_targets(ctx, raw, summary, reps)
    png = plot(ctx, summary)
    ctx.meta.update({"date": time.strftime("%Y%m%d-%H%M%S", time.localtime(ctx.t0)),
                     "reps": reps, "pinned": ctx.pin,
                     "lat_iters": lat_iters, "bw_iters": bw_iters, "elapsed_s": round(elapsed, 1),
                     "loadavg_before": load0, "loadavg_after": os.getloadavg()[0],
                     "cpu_pressure_some_pct": None if stall is None else round(100 * stall, 1),
                     "counters": notes[:3], "png": png})
    print_tables(ctx, summary, targets, reps, lat_iters, bw_iters, notes)
    ctx.finish()
    return 0


def summarize(ctx, raw):
    """{(tl, kind, size): medians and extremes over the repetitions}; writes summary.csv."""
    summary = {}
    for t in TRANSPORTS:
        for kind, sizes in (("lat", LAT_SIZES), ("bw", BW_SIZES)):
            for s in sizes:
                v = [r for r in raw if r["tl"] == t.name and r["kind"] == kind and r["bytes"] == s]
                summary[(t.name, kind, s)] = {
                    "lat": statistics.median(r["lat_us"] for r in v),
                    "bw": statistics.median(r["bw_MBps"] for r in v),
                    "lat_min": min(r["lat_us"] for r in v), "lat_max": max(r["lat_us"] for r in v)}
    write_csv(ctx.path("summary.csv"), "tl,kind,bytes,lat_us_median,lat_us_rep_min,"
              "lat_us_rep_max,bw_MBps_median,lat_ratio_vs_unimem",
              [(name, kind, s, "%.4f" % v["lat"], "%.4f" % v["lat_min"], "%.4f" % v["lat_max"],
                "%.2f" % v["bw"], "%.3f" % (v["lat"] / summary[("unimem", kind, s)]["lat"]))
               for (name, kind, s), v in sorted(summary.items(),
                                                key=lambda kv: (kv[0][1], kv[0][2], kv[0][0]))])
    return summary


def check_targets(ctx, raw, summary, reps):
    """[(name, value, op, limit, met)]; writes targets.csv."""
    def rep_ratio(num, den, size):
        """median over repetitions of num/den measured in the same repetition"""
        lat = {(r["rep"], r["tl"]): r["lat_us"] for r in raw
               if r["kind"] == "lat" and r["bytes"] == size}
        return statistics.median(lat[(k, num)] / lat[(k, den)] for k in range(reps))

    u8, p8, t8 = (summary[(n, "lat", 8)]["lat"] for n in ("unimem", "posix,cma", "tcp"))
    targets = [("tcp / unimem latency at 8 B", t8 / u8, ">=", 10.0),
               ("unimem / posix,cma latency at 8 B", u8 / p8, "<=", 1.5),
               ("same-rep ratio tcp / unimem at 8 B", rep_ratio("tcp", "unimem", 8), ">=", 10.0),
               ("same-rep ratio unimem / posix,cma at 8 B", rep_ratio("unimem", "posix,cma", 8),
                "<=", 1.5)]
    targets = [(n, v, op, lim, v >= lim if op == ">=" else v <= lim) for n, v, op, lim in targets]
    write_csv(ctx.path("targets.csv"), "target,value,op,limit,met",
              [(name, "%.3f" % val, op, "%.2f" % lim, "yes" if met else "no")
               for name, val, op, lim, met in targets])
    return targets


def print_tables(ctx, summary, targets, reps, lat_iters, bw_iters, notes):
    meta = ctx.meta
    print("MPI ping-pong, MPICH 4.0.2 ch4:ucx, 2 ranks, one-way latency (usec, median of %d "
          "alternating runs of %d round trips)" % (reps, lat_iters))
    print("%-8s %10s %10s %10s %12s %12s   %s" % (
        "size", "unimem", "posix,cma", "tcp", "tcp/unimem", "unimem/posix", "paper: Unimem, TCP"))
    for s in LAT_SIZES:
        u, p, t = (summary[(n, "lat", s)]["lat"] for n in ("unimem", "posix,cma", "tcp"))
        print("%-8s %10.2f %10.2f %10.2f %11.1fx %11.2fx   %.1f, %.1f (%.0fx)" % (
            fmt_size(s), u, p, t, t / u, u / p, PAPER_TABLE[s][0], PAPER_TABLE[s][1],
            PAPER_TABLE[s][1] / PAPER_TABLE[s][0]))
    print("\nbandwidth (MB/s, size / median one-way latency, %d round trips per size)" % bw_iters)
    print("%-8s %10s %10s %10s" % ("size", "unimem", "posix,cma", "tcp"))
    for s in BW_SIZES:
        print("%-8s %10.1f %10.1f %10.1f" % ((fmt_size(s),) + tuple(
            summary[(n, "bw", s)]["bw"] for n in ("unimem", "posix,cma", "tcp"))))
    print_checks(targets, meta, 42)
    print("unimem counters (one run): %s" % (notes[0] if notes else "-"))
    print("results: %s" % ctx.out)


def plot(ctx, summary):
    plt = pyplot()
    if not plt:
        return None
    fig, axs = plt.subplots(1, 2, figsize=(12, 4.5))
    for t in TRANSPORTS:
        pts = sorted((s, v) for (n, kind, s), v in summary.items() if n == t.name and kind == "bw")
        if not pts:
            continue
        xs = [s for s, _ in pts]
        axs[0].plot(xs, [v["lat"] for _, v in pts], marker="o", label=t.name)
        axs[1].plot(xs, [v["bw"] for _, v in pts], marker="o", label=t.name)
    for ax, title, unit in ((axs[0], "MPI ping-pong latency (one way, median)", "usec"),
                            (axs[1], "MPI ping-pong bandwidth (size / latency)", "MB/s")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel(unit)
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle("unimem (emulated ExaNeSt HAL) vs UCX posix,cma and tcp, MPICH 4.0.2, 2 ranks")
    return save(plt, fig, ctx.path("unimem.png"))
