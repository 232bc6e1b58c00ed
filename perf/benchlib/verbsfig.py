"""Figures the verbs-port suites (rdmach-rc, udz-ud) measure alike: a figure is (kind, test,
size); kind "mpi" (Debian's MPICH) or "ompi" (Open MPI) runs an MPI program of the build
(tests/mpi/pingpong, perf/mpi_rotbuf, perf/mpi_osc), the other kinds ucx_perftest."""

import csv
import os

from . import fmt_size
from .mpi import find_rotbuf, mpi_run
from .perftest import perftest
from .proc import MeasureError, log
from .stats import paired, rotated

MPI_KINDS = {"mpi": ("mpich", "mpich"), "ompi": ("openmpi", "ompi")}   # launch --impl, suffix
OSC_RUNS = {}   # (rep, kind, transport) -> mpi_osc's rows by op


def iters(test, size, quick):
    if not is_bw(test):
        return 1000 if quick else 3000
    return max(20, min(2000, (8 << 20 if quick else 32 << 20) // size))


LATENCY_TESTS = ("ucp_fadd", "ucp_cswap")   # round trips, reported as latency


def is_bw(test):
    return not (test.endswith("_lat") or test in LATENCY_TESTS)


def mpi_program_name(test):
    """Which MPI program measures an MPI figure."""
    if test == "window_bw":
        return "rotbuf"
    return "mpi_osc" if test.startswith("osc") else "pingpong"


def mpi_program(ctx, kind, name):
    """The MPI program `name` built for kind's MPI, or None."""
    impl, suffix = MPI_KINDS[kind]
    if name == "rotbuf":
        return find_rotbuf(ctx) if impl == "mpich" else None
    d = "perf" if name == "mpi_osc" else os.path.join("tests", "mpi")
    p = os.path.join(ctx.build, d, "%s.%s" % (name, suffix))
    return p if os.access(p, os.X_OK) else None


def one_mpi(ctx, t, kind, test, size, quick, timeout, rep):
    impl, prog = MPI_KINDS[kind][0], mpi_program(ctx, kind, mpi_program_name(test))
    if test.startswith("pingpong"):
        rows = mpi_run(ctx, t, [prog, "-s", str(size), "--csv",
                                "-", "-i", "200" if quick else "500"], "bytes", timeout * 4,
                       impl=impl)
        return float(rows[0]["bw_MBps" if is_bw(test) else "lat_us_median"])
    if test == "window_bw":
        rows = mpi_run(ctx, t, [prog, "-s", str(size), "-m", "bw",
                                "-b", "16M" if quick else "64M", "--csv"], "test", timeout * 4,
                       impl=impl)
        return float(rows[0]["bw_MBps_p50"])
    # one mpi_osc run per transport, MPI and repetition gives all its ops
    key = (rep, kind, t.name)
    if key not in OSC_RUNS:
        # its table starts "mode,window,sync,op,..."; the default run is latency under
        # lock_all + flush in an MPI_Win_allocate window, a row per op
        OSC_RUNS[key] = {r["op"]: r for r in mpi_run(
            ctx, t, [prog, "-s", "8", "-i",
                     "300" if quick else "1000", "--csv"], "mode", timeout * 4, impl=impl)
                         if r["mode"] == "lat"}
    return float(OSC_RUNS[key][test.split("_")[1]]["lat_us_median"])


def one(ctx, t, kind, test, size, extra, quick, timeout, rep, n=None, warmup_min=10):
    """One figure for one transport: an MPI program (one_mpi) or ucx_perftest (n iterations,
    default iters(); a tenth of them, at least warmup_min, to warm up)."""
    if kind in MPI_KINDS:
        return one_mpi(ctx, t, kind, test, size, quick, timeout, rep)
    n = n or iters(test, size, quick)
    r = perftest(t.env(ctx), test, size, n, max(warmup_min, n // 10),
                 uct=t.uct if kind == "uct" else None, extra=extra, timeout=timeout, pin=ctx.pin)
    return r["bw_MBps"] if is_bw(test) else r["lat_us"]

def campaign(ctx, tag, figures, who, reps, measure):
    """Every figure for every transport, reps times, the transports rotated per repetition and
    figure; an MPI figure whose program is not built is skipped. measure(t, rep, kind, test,
    size, extra) returns the value or raises MeasureError (logged, that value left out).
    Writes raw.csv; returns the rows (rep, figure index, transport, value)."""
    raw = []
    for rep in range(reps):
        for i, (kind, test, size, extra) in enumerate(figures):
            if kind in MPI_KINDS and not mpi_program(ctx, kind, mpi_program_name(test)):
                log("%s: no %s for %s: %s skipped" % (tag, mpi_program_name(test), kind, test))
                continue
            for t in rotated(who, rep + i):
                try:
                    v = measure(t, rep, kind, test, size, extra)
                except MeasureError as e:
                    log("%s: %s %s %s %s: %s" % (tag, kind, test, fmt_size(size), t.name, e))
                    continue
                raw.append((rep, i, t.name, v))
                log("%s: rep %d %-4s %-12s %6s %-9s %10.3f" % (
                    tag, rep, kind, test, fmt_size(size), t.name, v))
    with open(ctx.path("raw.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["rep", "kind", "test", "size", "transport", "value"])
        for rep, i, name, v in raw:
            w.writerow([rep] + list(figures[i][:3]) + [name, v])
    return raw


def paired_table(raw, reps, figures, ours, refs):
    """The summary of a verbs-port suite: per figure (kind, test, size, _) the medians of ours
    and of each built-in in refs and the ratio to each with the spread of the per-repetition
    ratios, printed as a table. Returns (csv header, rows, missing): missing names each figure
    ("kind test size") left without a value of ours or without a ratio to any built-in; a
    built-in failing one figure alone (1.22's rc_verbs at 64 peers) leaves its cells empty
    and is not counted."""
    header = (["kind", "test", "size", "unit", ours] + list(refs) + ["ratio_" + r for r in refs]
              + ["ratio_%s_%s" % (r, m) for r in refs for m in ("min", "max")])
    rows, missing = [], []
    print("\n%-4s %-12s %6s %-5s %10s " % ("", "test", "size", "unit", ours) +
          " ".join("%10s" % r for r in refs) + " " +
          " ".join("%20s" % ("/%s [spread]" % r) for r in refs))
    for i, (kind, test, size, _) in enumerate(figures):
        med, got = paired(raw, i, reps, ours, refs)
        if med[ours] is None or all(got[r] is None for r in refs):
            print("%-4s %-12s %6s  (missing)" % (kind, test, fmt_size(size)))
            missing.append("%s %s %s" % (kind, test, fmt_size(size)))
            continue
        unit = "MB/s" if is_bw(test) else "us"
        print("%-4s %-12s %6s %-5s " % (kind, test, fmt_size(size), unit) +
              " ".join("%10.2f" % med[n] if med[n] is not None else "%10s" % "-"
                       for n in (ours,) + tuple(refs)) + " " +
              " ".join("%10s [%.2f-%.2f]" % ("%.2fx" % got[r][0], got[r][1], got[r][2])
                       if got[r] else "%20s" % "-" for r in refs))
        rows.append([kind, test, size, unit] +
                    ["%.3f" % med[n] if med[n] is not None else "" for n in (ours,) + tuple(refs)]
                    + ["%.3f" % got[r][0] if got[r] else "" for r in refs]
                    + ["%.3f" % got[r][k] if got[r] else "" for r in refs for k in (1, 2)])
    return header, rows, missing
