"""perf/bench osc: MPI-3 one-sided communication over the project's transports against the
built-in a user would otherwise pick, under MPICH 4.0.2 (ch4:ucx) and Open MPI 4.1.4 (osc
ucx), alternating in one run: the figures of "MPI-3 one-sided communication on InfiniBand"
(flush vs flush_local, request-based Get-Compute-Put overlap, dynamic windows, the atomic
calls, Lock_all), measured by perf/mpi_osc.c (2 ranks, rank 1 the passive target):

  lat       put and get 8 B under Win_lock_all + Win_flush, + Win_flush_local, and each in
            its own Win_lock/Win_unlock; accumulate, get_accumulate, fetch_and_op and
            compare_and_swap (8 B, flush); all on a Win_allocate window
  windows   put, get and fetch_and_op 8 B on Win_create and dynamic windows (flush)
  bw        64 puts or gets then one flush, 64 KiB and 1 MiB (Win_allocate), 1 MiB dynamic,
            8 B and 4 KiB on Win_create (the rate of small operations on malloc'd memory)
  overlap   MPI_Rget / compute / MPI_Wait / MPI_Rput / compute / MPI_Wait / flush, with the
            computation calibrated to the communication: overlap in percent, 64 KiB-4 MiB
  lockall   one passive epoch: Win_lock_all, an 8-byte put, Win_unlock_all

Pairs (candidate / baseline): rdmach / sm and unimem / sm (shared memory), ud_zcopy / tcp
(loopback). Figures are medians over repetitions; ratios candidate / baseline per
repetition (median and range); latency: lower is better, bandwidth and overlap: higher.
Every candidate run must show in its counters that its transport carried the traffic.
Writes raw.csv, summary.csv, targets.csv, osc-<mpi>.png and meta.json.
"""

import os
import statistics
import time

from benchlib import fmt_size
from benchlib.env import Ctx
from benchlib.mpi import mpi_run_carried, parse_csv_rows
from benchlib.pairs import PAIRS, transports
from benchlib.plots import pyplot, save
from benchlib.proc import MeasureError, log
from benchlib.report import print_checks, write_csv
from benchlib.stats import alternating, cpu_stall_us, stall_fraction

NAME = "osc"
HELP = "MPI-3 one-sided (RMA) latency, bandwidth, overlap and atomics vs sm and tcp, both MPIs"
CONTENTION = False
TIMEOUT = (120, "seconds per MPI launch")

IMPLS = [("mpich", "MPICH 4.0.2 ch4:ucx"), ("openmpi", "Open MPI 4.1.4 osc ucx")]
# mpi_osc runs: (section, arguments); each gives several rows
RUNS = [("lat", ["-m", "lat", "-y", "flush", "-o", "put,get,acc,gacc,fop,cas", "-s", "8"]),
        ("lat", ["-m", "lat", "-y", "flush_local", "-o", "put,get", "-s", "8"]),
        ("lat", ["-m", "lat", "-y", "lock", "-o", "put,get", "-s", "8"]),
        ("windows", ["-m", "lat", "-W", "create", "-o", "put,get,fop", "-s", "8"]),
        ("windows", ["-m", "lat", "-W", "dynamic", "-o", "put,get,fop", "-s", "8"]),
        ("bw", ["-m", "bw", "-s", "64K,1M"]),
        ("bw", ["-m", "bw", "-W", "dynamic", "-s", "1M"]),
        ("bw", ["-m", "bw", "-W", "create", "-s", "8,4K"]),
        ("overlap", ["-m", "overlap", "-s", "64K,512K,4M"]),
        ("lockall", ["-m", "lockall"])]


def add_arguments(p):
    p.add_argument("--quick", action="store_true", help="3 repetitions, fewer iterations")
    p.add_argument("--only", help="candidates to run, comma-separated (default all: "
                   "rdmach,unimem,ud_zcopy)")
    p.add_argument("--impl", choices=["mpich", "openmpi", "both"], default="both")


def figure_key(row):
    """(mode, window, sync, op, bytes) of a row of mpi_osc's CSV."""
    return (row["mode"], row["window"], row["sync"], row["op"], int(row["bytes"]))


def value_of(row):
    if row["mode"] == "bw":
        return float(row["bw_MBps"]), "MB/s"
    if row["mode"] == "overlap":
        return float(row["overlap_pct"]), "%"
    return float(row["lat_us_median"]), "us"


def label(key):
    mode, window, sync, op, size = key
    if mode == "overlap":
        return "overlap Rget/Rput %s" % fmt_size(size)
    if mode == "lockall":
        return "lock_all epoch put 8"
    if mode == "bw":
        return "bw %s %s %s" % (op, fmt_size(size), window)
    if window != "allocate":
        return "%s %s %s" % (op, fmt_size(size), window)
    return "%s %s %s" % (op, fmt_size(size), sync)


def higher_is_better(key):
    return key[0] in ("bw", "overlap")


def measure(ctx, t, impl, args, quick, timeout):
    """The rows of one mpi_osc run."""
    prog = os.path.join(ctx.build, "perf", "mpi_osc." + ("ompi" if impl == "openmpi" else "mpich"))
    rc, out, err = mpi_run_carried(ctx, t, [prog] + args +
                                   ["-i", "300" if quick else "1000", "--csv"], timeout, impl=impl)
    rows = parse_csv_rows(out, "mode")
    if rc != 0 or not rows:
        raise MeasureError("%s %s %s: rc=%s %s" % (impl, t.name, " ".join(args), rc,
                                                  (err.strip() or out.strip())[-400:]))
    return rows


def run(args):
    reps = args.reps or (3 if args.quick else 5)
    only = args.only.split(",") if args.only else None
    pairs = [p for p in PAIRS if only is None or p[0].name in only]
    impls = [i for i in IMPLS if args.impl in ("both", i[0])]
    ctx = Ctx(args, NAME)
    for impl, _ in impls:
        p = os.path.join(ctx.build, "perf", "mpi_osc." + ("ompi" if impl == "openmpi" else "mpich"))
        if not os.access(p, os.X_OK):
            ctx.discard()
            log("bench osc: %s not built (ninja -C %s)" % (p, ctx.build))
            return 2
    who = transports(pairs)
    raw = []
    load0, stall0, t0 = os.getloadavg()[0], cpu_stall_us(), time.time()
    for rep, impl, _, (section, rargs), t in alternating(reps, impls, RUNS, who):
        try:
            rows = measure(ctx, t, impl, rargs, args.quick, args.timeout)
        except MeasureError as e:
            log("bench osc: %s" % e)
            continue
        for r in rows:
            v, unit = value_of(r)
            raw.append({"rep": rep, "impl": impl, "section": section, "key": figure_key(r),
                        "transport": t.name, "value": v, "unit": unit})
        log("bench osc: rep %d/%d %-7s %-8s %-22s done" % (
            rep + 1, reps, impl, t.name, " ".join(rargs[:4])))
    write_csv(ctx.path("raw.csv"), "rep,impl,section,mode,window,sync,op,bytes,transport,"
              "value,unit", [(r["rep"], r["impl"], r["section"]) + r["key"] +
                             (r["transport"], "%.4f" % r["value"], r["unit"]) for r in raw])
    summary = summarize(ctx, raw, pairs, impls)
    targets = check_targets(ctx, summary)
    pngs = [plot(ctx, summary, impl, title) for impl, title in impls]
    elapsed = time.time() - t0
    stall = stall_fraction(stall0, cpu_stall_us(), elapsed)
    ctx.meta.update({"reps": reps, "png": pngs, "elapsed_s": round(elapsed, 1), "loadavg_before": load0,
                     "loadavg_after": os.getloadavg()[0],
                     "cpu_pressure_some_pct": None if stall is None else round(100 * stall, 1)})
    print_tables(summary, impls, reps)
    print_checks(targets, ctx.meta, 56)
    ctx.finish()
    print("results: %s" % ctx.out)
    return 0


def summarize(ctx, raw, pairs, impls):
    """[(impl, section, key, cand, base, unit, cand median, base median, ratio, lo, hi)]"""
    out = []
    keys = []
    for r in raw:
        if (r["section"], r["key"]) not in keys:
            keys.append((r["section"], r["key"]))
    for impl, _ in impls:
        for section, key in keys:
            for cand, base in pairs:
                vals = {}
                for r in raw:
                    if r["impl"] == impl and r["key"] == key and r["section"] == section:
                        vals[(r["rep"], r["transport"])] = (r["value"], r["unit"])
                c = [v[0] for (rep, n), v in vals.items() if n == cand.name]
                b = [v[0] for (rep, n), v in vals.items() if n == base.name]
                per = [vals[(rep, cand.name)][0] / vals[(rep, base.name)][0]
                       for rep in {k[0] for k in vals}
                       if (rep, cand.name) in vals and (rep, base.name) in vals and
                       vals[(rep, base.name)][0] > 0]
                if not c or not b:
                    continue
                unit = next(iter(vals.values()))[1]
                mc, mb = statistics.median(c), statistics.median(b)
                out.append((impl, section, key, cand.name, base.name, unit, mc, mb,
                            mc / mb if mb > 0 else None, min(per) if per else None,
                            max(per) if per else None))
    write_csv(ctx.path("summary.csv"), "impl,section,mode,window,sync,op,bytes,candidate,"
              "baseline,unit,candidate_median,baseline_median,ratio,ratio_min,ratio_max",
              [(s[0], s[1]) + s[2] + s[3:6] + ("%.4f" % s[6], "%.4f" % s[7]) +
               tuple("" if x is None else "%.3f" % x for x in s[8:]) for s in out])
    return out


def find(summary, impl, cand, key):
    for s in summary:
        if s[0] == impl and s[3] == cand and s[2] == key:
            return s
    return None


def check_targets(ctx, summary):
    """The issue's targets that this suite measures (medians of the alternating runs)."""
    targets = []
    for impl in ("openmpi", "mpich"):
        for op in ("put", "get"):
            s = find(summary, impl, "rdmach", ("lat", "allocate", "flush", op, 8))
            if s and s[8] is not None:
                lim = 1.2 if impl == "openmpi" else 1.0
                targets.append(("%s %s 8 B rdmach / sm" % (impl, op), s[8], "<=", lim,
                                s[8] <= lim))
    for op in ("fop", "cas"):
        s = find(summary, "openmpi", "rdmach", ("lat", "allocate", "flush", op, 8))
        if s:
            targets.append(("openmpi %s rdmach (us)" % op, s[6], "<", 0.5, s[6] < 0.5))
            if s[8] is not None:
                targets.append(("openmpi %s rdmach / sm" % op, s[8], "<=", 1.0, s[8] <= 1.0))
    for impl in ("openmpi", "mpich"):
        s = find(summary, impl, "rdmach", ("overlap", "allocate", "flush", "get", 524288))
        if s:
            targets.append(("%s Rget/Rput overlap 512 KiB rdmach (%%)" % impl, s[6], ">=",
                            80, s[6] >= 80))
    write_csv(ctx.path("targets.csv"), "target,value,op,limit,met",
              [(n, "%.3f" % v, op, "%g" % lim, "yes" if met else "no")
               for n, v, op, lim, met in targets])
    return targets


def print_tables(summary, impls, reps):
    print("\nMPI-3 one-sided, 2 ranks (medians of %d alternating runs; ratio = candidate / "
          "baseline, [per-repetition range]; latency lower is better, bw and overlap higher)"
          % reps)
    for impl, title in impls:
        print("\n%s" % title)
        print("%-30s %-9s %-5s %10s %10s %8s %15s" % ("figure", "pair", "unit", "candidate",
                                                     "baseline", "ratio", "[range]"))
        for s in summary:
            if s[0] != impl:
                continue
            print("%-30s %-9s %-5s %10.3f %10.3f %8s %15s" % (
                label(s[2]), s[3], s[5], s[6], s[7],
                "-" if s[8] is None else "%.2fx" % s[8],
                "" if s[9] is None else "[%.2f-%.2f]" % (s[9], s[10])))


def plot(ctx, summary, impl, title):
    plt = pyplot()
    rows = [s for s in summary if s[0] == impl and s[8] is not None and s[1] != "overlap"]
    if plt is None or not rows:
        return None
    cands = []
    for s in rows:
        if s[3] not in cands:
            cands.append(s[3])
    keys = []
    for s in rows:
        if s[2] not in keys:
            keys.append(s[2])
    fig, ax = plt.subplots(figsize=(9, 1.5 + 0.32 * len(keys)))
    h = 0.8 / len(cands)
    for j, c in enumerate(cands):
        ys, xs, lo, hi = [], [], [], []
        for k, key in enumerate(keys):
            s = next((s for s in rows if s[3] == c and s[2] == key), None)
            if s is None:
                continue
            # plotted so that left of 1 is always better: latency ratio, 1/throughput ratio
            inv = higher_is_better(key)
            r, a, b = (1 / s[8], 1 / s[10], 1 / s[9]) if inv else (s[8], s[9], s[10])
            ys.append(k + (j - (len(cands) - 1) / 2) * h)
            xs.append(r)
            lo.append(max(0, r - a))
            hi.append(max(0, b - r))
        ax.barh(ys, xs, h, xerr=[lo, hi], label="%s / %s" % (c, rows[0][4] if c != "ud_zcopy"
                                                             else "tcp"))
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels([label(k) for k in keys], fontsize=7)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("time ratio candidate / baseline (log; < 1: candidate faster; bandwidth "
                  "shown as its inverse)")
    ax.set_title("%s: MPI-3 one-sided, medians and per-repetition range" % title, fontsize=10)
    ax.legend(fontsize=8)
    return save(plt, fig, ctx.path("osc-%s.png" % impl))
