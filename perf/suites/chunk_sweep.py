"""perf/bench chunk-sweep: UCP tag_bw at 1 and 4 MiB over rdmach's bcopy path for
UCX_RDMACH_CHUNK_SIZE 4K..128K (the MPICH2 RDMA channel paper's chunk-size figure), with posix
references."""

import csv

from benchlib import fmt_size, fmt_val, parse_sizes
from benchlib.env import Ctx, Transport, make_candidate, tl_available, tl_knobs, ucx_info
from benchlib.perftest import measure
from benchlib.plots import pyplot, save, series
from benchlib.proc import log
from benchlib.stats import Recorder, campaign, median, report_contention
from benchlib.report import close

NAME = "chunk-sweep"
HELP = "UCP tag_bw at 1 and 4 MiB over rdmach's bcopy path for UCX_RDMACH_CHUNK_SIZE 4K..128K"
# keep the bcopy path: no rendezvous (get_zcopy) and no eager zcopy, for every size
KEEP_BCOPY = {"UCX_RNDV_THRESH": "inf", "UCX_ZCOPY_THRESH": "inf"}


def add_arguments(p):
    p.add_argument("--quick", action="store_true", help="3 reps and smaller iteration counts")
    p.add_argument("--sizes", default="1M,4M")
    p.add_argument("--chunks", default="4K,8K,16K,32K,64K,128K")
    p.add_argument("--no-default-ref", action="store_true",
                   help="only posix with the same bcopy-only settings as the reference")
    p.add_argument("--force", action="store_true", help="run even if the knob is missing")
    p.add_argument("--ring-size", default="auto", help="UCX_RDMACH_RING_SIZE for the whole sweep "
                   "(default auto: the transport default, doubled until the largest chunk fits)")


def reported_bcopy(ctx, extra_env):
    """am_bcopy limit that ucx_info -d reports for rdmach under extra_env, or None when the
    interface does not open with that configuration."""
    inside = False
    for l in ucx_info(ctx, ["-d", "-t", "rdmach"], extra_env).splitlines():
        l = l.lstrip("#").strip()
        if l.startswith("Transport:"):
            inside = l.split(":", 1)[1].strip() == "rdmach"
        elif inside and l.startswith("am_bcopy:"):
            return l.split(":", 1)[1].strip()
    return None


def ring_for(ctx, chunks, knobs, want):
    """One UCX_RDMACH_RING_SIZE for the whole sweep, so that only the chunk size varies: the
    default if every chunk opens with it, else the smallest doubling that the largest chunk opens
    with (rdmach checks RING_SIZE against CHUNK_SIZE, SLOT_SIZE and LAZY_TAIL)."""
    if want and want != "auto":
        return want
    ring = knobs.get("UCX_RDMACH_RING_SIZE", "auto")
    if reported_bcopy(ctx, {"UCX_RDMACH_CHUNK_SIZE": str(max(chunks))}):
        return ring
    try:
        r = int(ring)
    except ValueError:
        r = 1024   # auto on shared memory: 128 KiB of 128-byte slots
    for _ in range(12):
        if reported_bcopy(ctx, {"UCX_RDMACH_CHUNK_SIZE": str(max(chunks)),
                                "UCX_RDMACH_RING_SIZE": str(r)}):
            return str(r)
        r *= 2
    return ring


def run(args):
    ctx = Ctx(args, "chunk-sweep")
    reps = args.reps or (3 if args.quick else 5)
    if not tl_available(ctx, make_candidate("rdmach", "memory")):
        log("bench: rdmach is not available (build %s, preload '%s'): build it first" %
            (ctx.build, ctx.preload_orig))
        ctx.discard()
        return 2
    knobs = tl_knobs(ctx, "UCX_RDMACH_")
    if "UCX_RDMACH_CHUNK_SIZE" not in knobs:
        log("bench: rdmach has no UCX_RDMACH_CHUNK_SIZE knob (ucx_info -c shows: %s)" %
            (", ".join(knobs) or "none"))
        if not args.force:
            ctx.discard()
            return 2
    chunks, sizes = parse_sizes(args.chunks), parse_sizes(args.sizes)
    ring = ring_for(ctx, chunks, knobs, args.ring_size)
    ring_env = {"UCX_RDMACH_RING_SIZE": ring} if ring != knobs.get("UCX_RDMACH_RING_SIZE") else {}
    ts = [Transport("rdmach@%d" % ch, "rdmach", ours=True,
                    extra_env=dict(KEEP_BCOPY, UCX_RDMACH_CHUNK_SIZE=str(ch), **ring_env))
          for ch in chunks]
    refs = [Transport("posix (bcopy)", "posix", extra_env=dict(KEEP_BCOPY))]
    if not args.no_default_ref:
        refs.append(Transport("posix (default)", "posix"))
        refs.append(Transport("posix,cma (default)", "posix,cma"))
    bcopy = {ch: reported_bcopy(ctx, dict(ring_env, UCX_RDMACH_CHUNK_SIZE=str(ch))) or "FAILS"
             for ch in chunks}
    ctx.meta.update(reps=reps, chunks=chunks, sizes=sizes, env_for_bcopy=KEEP_BCOPY,
                    ring_size=ring, rdmach_knobs=knobs, reported_am_bcopy=bcopy)
    log("bench: UCX_RDMACH_RING_SIZE=%s for every chunk size (default %s); am_bcopy reported: %s"
        % (ring, knobs.get("UCX_RDMACH_RING_SIZE"), ", ".join("%s->%s" % (fmt_size(c), b)
                                                            for c, b in bcopy.items())))
    rec = Recorder()
    bw = lambda t, z: measure(t.env(ctx), "tag_bw", z, args.quick, timeout=args.timeout,
                              pin=ctx.pin)
    campaign(ctx, rec, [("chunk", z, ts + refs, bw, ["bw_MBps"]) for z in sizes], reps, args,
             "bench: chunk sweep, {total} measurements, rdmach with %s; results in %s" %
             (" ".join("%s=%s" % kv for kv in KEEP_BCOPY.items()), ctx.out),
             label=lambda t: t.name.replace("rdmach@", ""), sec_width=5)
    rec.write_raw(ctx.path("raw.csv"))
    report(ctx, rec, chunks, sizes, refs, bcopy, ring, reps)
    return close(ctx, rec, ["raw.csv", "summary.csv", "meta.json"],
                 plot(ctx, rec, chunks, sizes, refs, ring, reps))


def report(ctx, rec, chunks, sizes, refs, bcopy, ring, reps):
    """The table of MB/s per chunk and size, the best chunks, summary.csv."""
    print("\nUCP tag_bw with rdmach bcopy only (%s, UCX_RDMACH_RING_SIZE=%s), MB/s (10^6), "
          "medians of %d alternating reps"
          % (", ".join("%s=%s" % kv for kv in KEEP_BCOPY.items()), ring, reps))
    print("%-10s %-22s" % ("chunk", "ucx_info am bcopy") +
          "".join("%14s" % fmt_size(z) for z in sizes))
    rows, best = [], {}
    lines = [("rdmach@%d" % ch, "rdmach", ch, "%-10s %-22s" % (fmt_size(ch), bcopy[ch][:22]))
             for ch in chunks] + [(t.name, t.name, "", "%-33s" % t.name) for t in refs]
    for name, tname, ch, line in lines:
        for z in sizes:
            v = rec.values("chunk", z, name, "bw_MBps")
            m = median(v)
            if ch and m and (z not in best or m > best[z][1]):
                best[z] = (ch, m)
            line += "%14s" % (fmt_val(m) if m else "-")
            rows.append(dict(transport=tname, chunk=ch, size=z, n=len(v),
                             median=round(m, 1) if m else "",
                             min=round(min(v), 1) if v else "", max=round(max(v), 1) if v else ""))
        print(line)
    for z, (ch, m) in sorted(best.items()):
        print("best chunk for %s: %s (%.0f MB/s)" % (fmt_size(z), fmt_size(ch), m))
    report_contention(ctx, rec, {"chunk"}, lead="")
    with open(ctx.path("summary.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, ["transport", "chunk", "size", "n", "median", "min", "max"])
        w.writeheader()
        w.writerows(rows)
    ctx.meta["best_chunk"] = {str(z): ch for z, (ch, _) in best.items()}


def plot(ctx, rec, chunks, sizes, refs, ring, reps):
    """chunk-sweep.png: bandwidth against chunk size, one curve per message size, dashed lines
    for the references."""
    plt = pyplot()
    if not plt:
        return None
    fig, ax = plt.subplots(figsize=(8, 5))
    cmap = plt.get_cmap("tab10")
    for i, z in enumerate(sizes):
        # one series over the chunk sizes: the chunk is in the transport's name
        pts = [(ch, series(rec, "chunk", "bw_MBps", "rdmach@%d" % ch, [z], 1e-3)) for ch in chunks]
        pts = [(ch, ys[0], err[0][0], err[1][0]) for ch, (_, ys, err) in pts if ys]
        ax.errorbar([p[0] for p in pts], [p[1] for p in pts],
                    yerr=[[p[2] for p in pts], [p[3] for p in pts]], fmt="o-", color=cmap(i),
                    capsize=2, label="rdmach %s messages" % fmt_size(z))
        for j, t in enumerate(refs):
            _, ys, _ = series(rec, "chunk", "bw_MBps", t.name, [z], 1e-3)
            if ys:
                ax.axhline(ys[0], color=cmap(i), ls=["--", ":", "-."][j % 3], lw=1,
                           label="%s %s" % (t.name, fmt_size(z)))
    ax.set_xscale("log", base=2)
    ax.set_xticks(chunks)
    ax.set_xticklabels([fmt_size(c).replace(" ", "") for c in chunks])
    ax.set_xlabel("UCX_RDMACH_CHUNK_SIZE (am max_bcopy)")
    ax.set_ylabel("GB/s")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.set_title("UCP tag_bw over rdmach, bcopy path only (UCX_RNDV_THRESH=inf, "
                 "UCX_ZCOPY_THRESH=inf)\nUCX_RDMACH_RING_SIZE=%s; medians of %d reps, "
                 "bars = quartiles" % (ring, reps), fontsize=10)
    ax.legend(fontsize=7)
    return save(plt, fig, ctx.path("chunk-sweep.png"))
