"""perf/bench rdmach: rdmach (or any --candidate) against posix and posix,cma: UCT am_lat, UCP
tag_lat, tag_bw in and out of cache, MPI ping-pong and rotating-buffer MPI (out of cache)."""

import statistics

from benchlib import KiB, MiB, fmt_size, parse_size, parse_sizes, short
from benchlib.env import STOCK, Ctx, Transport, make_candidate, tl_available
from benchlib.mpi import find_pingpong, find_rotbuf, launcher, mpi_run
from benchlib.perftest import measure
from benchlib.plots import COLORS, errorbar_panel, pyplot, save
from benchlib.proc import log
from benchlib.report import Section, Targets, close, summarize
from benchlib.stats import Recorder, campaign, report_contention

NAME = "rdmach"
HELP = ("rdmach vs posix / posix,cma: UCT am_lat, UCP tag_lat, tag_bw (in and out of cache), "
        "MPI ping-pong")


def add_arguments(p):
    p.add_argument("--quick", action="store_true", help="few sizes, 3 reps (demo, < 2 min)")
    p.add_argument("--candidate", default="rdmach",
                   help="transport under test (default rdmach; a stock one such as tcp or sysv "
                   "to validate the harness)")
    p.add_argument("--candidate-dev", default="memory", help="its UCT device (default memory)")
    p.add_argument("--baselines", help="stock baselines separated by '/', each an UCX_TLS value "
                   "(default posix/posix,cma); 'posix' is the reference for ratios")
    p.add_argument("--sizes", help="override the tag_lat/tag_bw/MPI size list, e.g. 8,64K,1M")
    p.add_argument("--pool", default="128M", help="rotating-buffer pool per buffer for the "
                   "out-of-cache MPI runs (default 128M = 4x the 32 MiB LLC)")
    p.add_argument("--skip", help="comma list of parts to skip: am_lat,tag_lat,tag_bw,ooc,mpi,"
                   "mpi_ooc")


def sizes(quick):
    """(am, lat, bw, ooc, mpi, rotbuf) size lists."""
    if quick:
        return ([8], [8, 4 * KiB, 64 * KiB, MiB], [8, 4 * KiB, 64 * KiB, MiB, 4 * MiB],
                [64 * MiB], [8, 4 * KiB, 64 * KiB, MiB, 4 * MiB], [64 * KiB, MiB, 4 * MiB])
    full = [8, 32, 128, 512, 2 * KiB, 8 * KiB, 16 * KiB, 32 * KiB, 64 * KiB, 128 * KiB,
            256 * KiB, 512 * KiB, MiB, 2 * MiB, 4 * MiB]
    return ([8, 64], full, full, [64 * MiB, 256 * MiB], full,
            [4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, MiB, 4 * MiB])


def mpi_items(ctx, args, ts, skip, mpi_sizes, rot_sizes, pool, budget):
    """The MPI items; each launch covers all its sizes (item size 0)."""
    pingpong = find_pingpong(ctx)
    rotbuf = find_rotbuf(ctx) if not ({"mpi", "mpi_ooc"} <= skip) else None
    ctx.meta.update(pingpong=pingpong, rotbuf=rotbuf)
    items = []
    join = lambda zs: ",".join(str(s) for s in zs)
    if "mpi" not in skip:
        if pingpong:
            def pp_runner(t, _size):
                rows = mpi_run(ctx, t, [pingpong, "-s", join(mpi_sizes), "--csv", "-",
                                        "--no-check"], "bytes", args.timeout * 4)
                return {int(r["bytes"]): {"lat_us": r["lat_us_median"], "bw_MBps": r["bw_MBps"]}
                        for r in rows}
            items.append(("mpi_pingpong", 0, ts, pp_runner, None))
        elif rotbuf:
            def pp_runner(t, _size):
                rows = mpi_run(ctx, t, [rotbuf, "-s", join(mpi_sizes), "-m", "lat", "-b",
                                        budget, "--csv"], "test", args.timeout * 4)
                return {int(r["size"]): {"lat_us": r["lat_us_p50"], "bw_MBps": r["bw_MBps_p50"]}
                        for r in rows}
            items.append(("mpi_pingpong", 0, ts, pp_runner, None))
        else:
            log("bench: no MPI ping-pong program (pingpong.mpich or mpi_rotbuf): MPI part skipped")
    if "mpi_ooc" not in skip and rotbuf:
        def rot_runner(t, _size):
            rows = mpi_run(ctx, t, [rotbuf, "-s", join(rot_sizes), "-p", str(pool), "-m", "both",
                                    "-b", budget, "--csv"], "test", args.timeout * 4)
            res = {}
            for r in rows:
                d = res.setdefault(int(r["size"]), {})
                if r["test"] == "lat":
                    d["lat_us"] = r["lat_us_p50"]
                else:
                    d["bw_MBps"] = r["bw_MBps_p50"]
            return res
        items.append(("mpi_rotbuf_ooc", 0, ts, rot_runner, None))
    return items


def run(args):
    ctx = Ctx(args, "rdmach" if args.candidate == "rdmach" else "cmp-" + short(args.candidate))
    quick = args.quick
    reps = args.reps or (3 if quick else 5)
    cand = make_candidate(args.candidate, args.candidate_dev)
    if not tl_available(ctx, cand):
        log("bench: transport '%s' is not available (build %s, preload '%s').\n"
            "       Build it (ninja -C build) or compare stock transports, e.g.\n"
            "       perf/bench rdmach --candidate tcp" % (cand.name, ctx.build, ctx.preload_orig))
        ctx.discard()
        return 2
    blist = args.baselines.split("/") if args.baselines else ["posix", "posix,cma"]
    baselines = [STOCK.get(b) or Transport(b, b) for b in blist if b and b != cand.name]
    names = [cand.name] + [b.name for b in baselines]
    lat_ts = [cand] + baselines
    uct_ts = [t for t in lat_ts if t.uct]
    skip = set(args.skip.split(",")) if args.skip else set()
    am_sizes, lat_sizes, bw_sizes, ooc_sizes, mpi_sizes, rot_sizes = sizes(quick)
    if args.sizes:
        lat_sizes = bw_sizes = mpi_sizes = parse_sizes(args.sizes)
    pool = parse_size(args.pool)
    budget = "128M" if quick else "512M"  # mpi_rotbuf: bytes per size and test

    def ucx_item(test, uctest):
        return lambda t, size: measure(t.env(ctx), test, size, quick,
                                       uct=t.uct if uctest else None, timeout=args.timeout,
                                       pin=ctx.pin)

    items = []
    for part, sec, test, zs, ts, uctest in (
            ("am_lat", "uct_am_lat", "am_lat", am_sizes, uct_ts, True),
            ("tag_lat", "ucp_tag_lat", "tag_lat", lat_sizes, lat_ts, False),
            ("tag_bw", "ucp_tag_bw", "tag_bw", bw_sizes, lat_ts, False),
            ("ooc", "ucp_tag_bw_ooc", "tag_bw", ooc_sizes, lat_ts, False)):
        if part in skip or (uctest and len(uct_ts) < 2):
            continue
        items += [(sec, z, ts, ucx_item(test, uctest), ["bw_MBps" if "bw" in test else "lat_us"])
                  for z in zs]
    ctx.meta.update(reps=reps, quick=quick, candidate=cand.name, baselines=names[1:],
                    pool_bytes=pool, launcher=launcher() or "mpiexec.mpich -genv")
    items += mpi_items(ctx, args, lat_ts, skip, mpi_sizes, rot_sizes, pool, budget)
    rec = Recorder()
    campaign(ctx, rec, items, reps, args, "bench: {total} measurements (%d reps, alternating "
             "%s), results in %s" % (reps, " / ".join(names), ctx.out))

    rec.write_raw(ctx.path("raw.csv"))
    c, ref = cand.name, "posix"
    print("\n=== %s vs %s: medians of %d alternating repetitions; ratio = %s / baseline "
          "(latency: < 1 is better, bandwidth: > 1 is better); '~' = quartile spread > 15%%" %
          (c, ", ".join(names[1:]), reps, c))
    secs = sections(ctx, pool)
    med = summarize(rec, secs, names, c, ref, ctx.path("summary.csv"))
    targets(ctx, rec, med, c)
    report_contention(ctx, rec, set(x.key for x in secs))
    return close(ctx, rec, ["raw.csv", "summary.csv", "targets.csv", "meta.json"],
                 plot(ctx, rec, names, c))


def sections(ctx, pool):
    mb = "MB/s (10^6 B/s)"
    pp = "pingpong.mpich" if ctx.meta.get("pingpong") else "mpi_rotbuf -p 0"
    return [
        Section("uct_am_lat", "UCT am_short latency (ucx_perftest -t am_lat, 50th pct, one way)",
                "lat_us", "usec", True),
        Section("ucp_tag_lat", "UCP tag latency (ucx_perftest -t tag_lat, 50th pct, one way)",
                "lat_us", "usec", True),
        Section("ucp_tag_bw", "UCP tag bandwidth, in cache (ucx_perftest -t tag_bw: one buffer)",
                "bw_MBps", mb, False),
        Section("ucp_tag_bw_ooc", "UCP tag bandwidth, out of cache (tag_bw, messages > LLC)",
                "bw_MBps", mb, False),
        Section("mpi_pingpong", "MPI ping-pong latency (MPICH ch4:ucx, %s, median, one way)" % pp,
                "lat_us", "usec", True),
        Section("mpi_pingpong", "MPI ping-pong bandwidth (size / median one-way latency)",
                "bw_MBps", mb, False),
        Section("mpi_rotbuf_ooc", "MPI ping-pong latency, rotating buffers over a %s pool "
                "(out of cache)" % fmt_size(pool), "lat_us", "usec", True),
        Section("mpi_rotbuf_ooc", "MPI bandwidth (window of 16), rotating buffers over a %s "
                "pool (out of cache)" % fmt_size(pool), "bw_MBps", mb, False),
    ]


def targets(ctx, rec, med, c):
    def best_bw(sec, z):
        return max([med[k] for k in med if k[0] == sec and k[1] == "bw_MBps" and k[2] == z and
                    k[3] in ("posix", "posix,cma")] or [0]) or None

    t = Targets(with_aim=True, name_width=28, with_same=True)
    for name, sec in (("UCT am_short 8 B latency", "uct_am_lat"),
                      ("UCP tag 8 B latency", "ucp_tag_lat")):
        # an 8 B latency follows the VM's core-to-core mode (perf/RESULTS.md): the ratio over
        # the repetitions whose two runs ran in one mode beside the median's
        t.add(name, "posix", med.get((sec, "lat_us", 8, c)), med.get((sec, "lat_us", 8, "posix")),
              1.0, True, 0.9, same=rec.same_mode(sec, 8, "lat_us", c, "posix"))
    for z in (64 * KiB, MiB):
        t.add("UCP tag bandwidth %s" % fmt_size(z), "best(posix, posix+cma)",
              med.get(("ucp_tag_bw", "bw_MBps", z, c)), best_bw("ucp_tag_bw", z), 1.0, False)
    t.write(ctx, "Targets (%s vs baseline; reported, not tuned for):" % c)


def plot(ctx, rec, names, cand):
    plt = pyplot()
    if not plt:
        return None
    fig, axs = plt.subplots(2, 2, figsize=(13, 9))
    panels = [
        (axs[0][0], [("ucp_tag_lat", "-", "")], "lat_us", "UCP tag latency (50th pct, one way)",
         "usec"),
        (axs[0][1], [("ucp_tag_bw", "-", " in cache"), ("ucp_tag_bw_ooc", "--", " out of cache")],
         "bw_MBps", "UCP tag bandwidth (ucx_perftest tag_bw)", "GB/s"),
        (axs[1][0], [("mpi_pingpong", "-", " same buffer"),
                     ("mpi_rotbuf_ooc", "--", " rotating buffers")], "lat_us",
         "MPI ping-pong latency (MPICH ch4:ucx, median, one way)", "usec"),
        (axs[1][1], [("mpi_pingpong", "-", " ping-pong, same buffer"),
                     ("mpi_rotbuf_ooc", "--", " window 16, rotating buffers")], "bw_MBps",
         "MPI bandwidth", "GB/s"),
    ]
    for ax, curves, metric, title, unit in panels:
        errorbar_panel(ax, rec, curves, metric, names, title, unit, COLORS, cand=cand)
    am = ["%s %.3f us" % (n, statistics.median(v)) for n in names
          for v in [rec.values("uct_am_lat", 8, n, "lat_us")] if v]
    fig.suptitle("%s vs %s — medians of %d alternating reps, bars = quartiles%s" %
                 (cand, ", ".join(names[1:]), ctx.meta.get("reps", 0),
                  ("\nUCT am_short 8 B: " + ", ".join(am)) if am else ""), fontsize=11)
    return save(plt, fig, ctx.path("%s.png" % short(cand)))
