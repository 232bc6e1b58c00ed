"""perf/bench ab: two builds of the project, the README's headline figures, alternating.

For a change that must not change behaviour (a restructuring), this measures the headline
figures with the build under test (--build, default the current one) and a reference build
(--ref, e.g. a worktree of the commit before the change), in the same run: every repetition
measures both builds and the UCX built-in next to them, in a rotated order.

  rdmach     UCP tag latency 8 B, tag bandwidth 64 KiB and 1 MiB   vs posix
  ud_zcopy   UCP tag latency 8 B, tag bandwidth 64 KiB and 1 MiB   vs tcp  (loopback)
  unimem     MPI ping-pong latency 8 B and 4 KiB (MPICH)           vs posix,cma
  rdmach     MPI (MPICH, perf/mpi_p2p, OSU's mean) windowed bandwidth 64 KiB into one receive
             buffer, and 64 KiB, 256 KiB, 1 MiB with each receive into its own buffer
             (-rot), ping-pong latency 256 KiB                     vs posix,cma

Prints, per figure, the medians of each build and of the built-in, each build's ratio to the
built-in, and build / ref with the spread of the per-repetition ratios. Writes raw.csv and
summary.csv. A figure "got worse" only beyond the spread.
"""

import csv
import os
import statistics

from benchlib import fmt_size
from benchlib.env import (STOCK, Ctx, Transport, ext_preload, plugin_mode, snapshot_plugins,
                          snapshot_preload)
from benchlib.mpi import find_perf_mpi, find_pingpong, mpi_cmd, p2p_args, parse_csv_rows
from benchlib.perftest import measure
from benchlib.proc import MeasureError, log, run as run_cmd
from benchlib.stats import rotated

NAME = "ab"
HELP = "two builds (--build vs --ref), the README's headline figures, alternating"
CONTENTION = False
REPS_HELP = "repetitions (default 5, --quick 3)"

# (transport, built-in, kind, test, size): kind "uct" = ucx_perftest over UCP, "mpi" = pingpong
FIGURES = [
    ("rdmach", "posix", "ucp", "tag_lat", 8), ("rdmach", "posix", "ucp", "tag_bw", 65536),
    ("rdmach", "posix", "ucp", "tag_bw", 1 << 20),
    ("ud_zcopy", "tcp", "ucp", "tag_lat", 8), ("ud_zcopy", "tcp", "ucp", "tag_bw", 65536),
    ("ud_zcopy", "tcp", "ucp", "tag_bw", 1 << 20),
    ("unimem", "posix,cma", "mpi", "lat", 8), ("unimem", "posix,cma", "mpi", "lat", 4096),
    ("rdmach", "posix,cma", "p2p", "bw", 65536), ("rdmach", "posix,cma", "p2p", "bw-rot", 65536),
    ("rdmach", "posix,cma", "p2p", "bw-rot", 262144),
    ("rdmach", "posix,cma", "p2p", "bw-rot", 1 << 20), ("rdmach", "posix,cma", "p2p", "lat", 262144),
]


def add_arguments(p):
    p.add_argument("--ref", required=True, help="the reference build dir (built by scripts/build)")
    p.add_argument("--quick", action="store_true", help="3 repetitions, shorter runs")
    p.add_argument("--only", help="comma list of transports to measure (default all)")


class BuildCtx:
    """The Ctx of one build for Transport.env(): its own snapshot, a preload (UCX 1.13.1) or
    plugins (a build for UCX 1.22, which loads them from UCX_PLUGIN_PATH)."""

    def __init__(self, ctx, build, tag):
        self.build, self.pin, self.meta = build, ctx.pin, ctx.meta
        self.preload, _ = snapshot_preload(ext_preload(build), os.path.join(ctx.out, tag))
        self.plugin_env = {}
        if plugin_mode(build):
            self.plugin_env, _ = snapshot_plugins(build, os.path.join(ctx.out, tag))


def one(ctx, bctx, t, kind, test, size, quick, timeout):
    """One measurement: microseconds for a latency, MB/s for a bandwidth."""
    if kind == "ucp":
        env = t.env(bctx)
        if t.tls in ("ud_zcopy", "tcp"):
            env["UCX_NET_DEVICES"] = "lo"
        r = measure(env, test, size, quick, pin=ctx.pin, timeout=timeout)
        return r["bw_MBps"] if test.endswith("_bw") else r["lat_us"]
    if kind == "p2p":
        args = p2p_args(ctx.meta["p2p"], test, size)
        cmd, env = mpi_cmd(bctx, t, args, launch_timeout=int(timeout * 4))
        rc, out, err = run_cmd(cmd, env, timeout * 4 + 30)
        rows = parse_csv_rows(out, "mode")
        if not rows:
            raise MeasureError("mpi_p2p over %s: rc %d %s" % (t.name, rc, err[-300:]))
        return float(rows[0]["lat_us_mean" if test == "lat" else "bw_MBps_mean"])
    args = [ctx.meta["pingpong"], "-s", str(size), "--csv", "-", "-i",
            "5000" if quick else "20000"]
    cmd, env = mpi_cmd(bctx, t, args, launch_timeout=int(timeout * 4))
    rc, out, err = run_cmd(cmd, env, timeout * 4 + 30)
    rows = parse_csv_rows(out, "bytes")
    if not rows:
        raise MeasureError("pingpong over %s: rc %d %s" % (t.name, rc, err[-300:]))
    return float(rows[0]["lat_us_median"])


def run(args):
    ctx = Ctx(args, NAME)
    quick = args.quick
    reps = args.reps or (3 if quick else 5)
    builds = {"new": BuildCtx(ctx, ctx.build, "new"),
              "ref": BuildCtx(ctx, os.path.abspath(args.ref), "ref")}
    ctx.meta["ref"] = builds["ref"].build
    ctx.meta["pingpong"] = find_pingpong(ctx)
    ctx.meta["p2p"] = find_perf_mpi(ctx.build, "mpi_p2p")
    only = set(args.only.split(",")) if args.only else None
    figs = [f for f in FIGURES if only is None or f[0] in only]
    raw = []   # (rep, figure index, who, value)
    for rep in range(reps):
        for i, (tl, base, kind, test, size) in enumerate(figs):
            ours = Transport(tl, tl, ours=True)
            who = [("new", ours, builds["new"]), ("ref", ours, builds["ref"]),
                   (base, STOCK[base], builds["new"])]
            for name, t, bctx in rotated(who, rep + i):
                try:
                    v = one(ctx, bctx, t, kind, test, size, quick, args.timeout)
                except MeasureError as e:
                    log("ab: %s %s %s %s: %s" % (tl, test, fmt_size(size), name, e))
                    continue
                raw.append((rep, i, name, v))
                log("ab: rep %d %-8s %-7s %6s %-9s %10.3f" % (rep, tl, test, fmt_size(size),
                                                              name, v))
    with open(ctx.path("raw.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["rep", "transport", "test", "size", "who", "value"])
        for rep, i, name, v in raw:
            w.writerow([rep, figs[i][0], figs[i][3], figs[i][4], name, v])
    rows = summarize(figs, raw, reps)
    with open(ctx.path("summary.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["transport", "test", "size", "unit", "new", "ref", "builtin", "new_vs_builtin",
                    "ref_vs_builtin", "new_vs_ref", "new_vs_ref_min", "new_vs_ref_max"])
        w.writerows(rows)
    ctx.finish()
    print("results: %s" % ctx.out)
    return 0


def summarize(figs, raw, reps):
    rows = []
    print("\n%-9s %-8s %6s %-5s %9s %9s %9s %8s %8s %16s" % (
        "transport", "test", "size", "unit", "new", "ref", "built-in", "new/bi", "ref/bi",
        "new/ref [spread]"))
    for i, (tl, base, kind, test, size) in enumerate(figs):
        vals = {w: {r: v for r, j, ww, v in raw if j == i and ww == w} for w in ("new", "ref", base)}
        if not all(vals.values()):
            continue
        med = {w: statistics.median(v.values()) for w, v in vals.items()}
        per = [vals["new"][r] / vals["ref"][r] for r in range(reps)
               if r in vals["new"] and r in vals["ref"]]
        unit = "MB/s" if (kind == "ucp" and test.endswith("_bw")) or \
            (kind == "p2p" and test != "lat") else "us"
        row = [tl, test, size, unit, round(med["new"], 3), round(med["ref"], 3),
               round(med[base], 3), round(med["new"] / med[base], 3),
               round(med["ref"] / med[base], 3), round(med["new"] / med["ref"], 3),
               round(min(per), 3), round(max(per), 3)]
        rows.append(row)
        print("%-9s %-8s %6s %-5s %9.3f %9.3f %9.3f %7.2fx %7.2fx %6.2fx [%.2f-%.2f]" % (
            tl, test, fmt_size(size), unit, med["new"], med["ref"], med[base],
            row[7], row[8], row[9], row[10], row[11]))
    return rows
