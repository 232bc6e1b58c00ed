"""perf/bench scaling: receiver progress cost against the number of connected peers
(perf/rdmach_progress_scale: one receiver iface, N sender ifaces in one process, UCT API), for
rdmach with hot rings and doorbells, rdmach polling every ring (POLL_ALL=y) and posix."""

import os

from benchlib.env import STOCK, Ctx, Transport, build_dir, perf_build_dir, tl_available, \
    tl_knobs
from benchlib.mpi import parse_csv_rows
from benchlib.plots import pyplot, save, series
from benchlib.proc import MeasureError, log, run as run_cmd
from benchlib.report import Section, close, summarize
from benchlib.stats import Recorder, campaign, report_contention

NAME = "scaling"
HELP = ("rdmach progress cost with 2, 8, 64 peers (runs <build>/perf/rdmach_progress_scale if "
        "built)")
METRICS = [("idle_ns_per_progress", "idle: ns per uct_iface_progress(), N silent peers"),
           ("one_active_ns_per_msg", "one active peer of N: ns per message"),
           ("round_robin_ns_per_msg", "all N peers in turn: ns per message")]
COLORS = {"rdmach": "tab:red", "rdmach POLL_ALL=y": "tab:orange", "posix": "tab:blue"}


def add_arguments(p):
    p.add_argument("--quick", action="store_true", help="3 reps, 50000 iterations")
    p.add_argument("--peers", default="2,8,64")
    p.add_argument("--iters", type=int, help="-n for the program (default 200000)")
    p.add_argument("extra", nargs="*", help="extra arguments for the program (after --)")


def find_prog(build):
    cands = [os.path.join(d, "rdmach_progress_scale") for d in
             (os.path.join(build, "perf"), os.path.join(build, "tests", "uct"),
              os.path.join(build, "tests"), os.path.join(build, "uct", "rdmach"),
              os.path.join(perf_build_dir(), "meson", "perf"))]
    return next((c for c in cands if os.access(c, os.X_OK)), None), cands


def run(args):
    prog, cands = find_prog(build_dir(args))
    if not prog:
        print("bench scaling: rdmach_progress_scale is not built yet (looked for %s).\n"
              "  It is the UCT-level program (perf/rdmach_progress_scale.c, built by "
              "perf/meson.build)\n"
              "  that measures the receiver's progress cost with 2, 8 and 64 connected peers."
              % ", ".join(cands))
        return 0
    ctx = Ctx(args, "scaling")
    reps = args.reps or (3 if args.quick else 5)
    if not tl_available(ctx, Transport("rdmach", "rdmach", ours=True)):
        log("bench: rdmach is not available (build %s): build it first" % ctx.build)
        ctx.discard()
        return 2
    configs = [Transport("rdmach", "rdmach", ours=True)]
    if "UCX_RDMACH_POLL_ALL" in tl_knobs(ctx, "UCX_RDMACH_"):
        # the MPICH2 RDMA channel's behaviour: poll every ring on every call
        configs.append(Transport("rdmach POLL_ALL=y", "rdmach", ours=True,
                                 args=["-c", "POLL_ALL=y"]))
    configs.append(STOCK["posix"])
    names = [c.name for c in configs]
    iters = args.iters or (50000 if args.quick else 200000)
    ctx.meta.update(reps=reps, program=prog, peers=args.peers, iters=iters, configs=names)

    def once(t, _size):  # one run covers every peer count
        cmd = [prog, "-t", t.tls.split(",")[0], "-p", args.peers, "-n", iters, "--csv"] + \
            t.args + list(args.extra)
        if ctx.pin:
            cmd = ["taskset", "-c", "0"] + cmd
        rc, out, err = run_cmd(cmd, t.env(ctx), args.timeout * 5)
        rows = parse_csv_rows(out, "tl")
        if rc != 0 or not rows:
            raise MeasureError("rc=%s: %s" % (rc, (err or out).strip()[-300:]))
        return {int(r["peers"]): {m: r[m] for m, _ in METRICS if m in r} for r in rows}

    rec = Recorder()
    campaign(ctx, rec, [("scaling", 0, configs, once, None)], reps, args,
             "bench: %s, peers %s, %d reps alternating %s; results in %s" %
             (prog, args.peers, reps, " / ".join(names), ctx.out), sec_width=7)
    rec.write_raw(ctx.path("raw.csv"))
    print("\n=== receiver progress cost against connected peers (%s), medians of %d alternating "
          "reps; ratio = rdmach / baseline, < 1 is cheaper" % (os.path.basename(prog), reps))
    summarize(rec, [Section("scaling", title, m, "ns", True, xname="peers", xfmt=str)
                    for m, title in METRICS],
              names, "rdmach", "posix", ctx.path("summary.csv"), best_of=["posix"])
    report_contention(ctx, rec, {"scaling"})
    return close(ctx, rec, ["raw.csv", "summary.csv", "meta.json"],
                 plot(ctx, rec, names, prog, reps))


def plot(ctx, rec, names, prog, reps):
    plt = pyplot()
    if not plt:
        return None
    fig, axs = plt.subplots(1, len(METRICS), figsize=(14, 4.5))
    for ax, (m, title) in zip(axs, METRICS):
        for n in names:
            xs, ys, err = series(rec, "scaling", m, n)
            if xs:
                ax.errorbar(xs, ys, yerr=err, fmt="o-", capsize=2, color=COLORS.get(n), label=n)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        peers = sorted(rec.sizes("scaling"))
        ax.set_xticks(peers)
        ax.set_xticklabels([str(p) for p in peers])
        ax.set_xlabel("connected peers")
        ax.set_ylabel("ns")
        ax.set_title(title, fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("rdmach progress cost vs peers (%s), medians of %d reps, bars = quartiles"
                 % (os.path.basename(prog), reps), fontsize=10)
    return save(plt, fig, ctx.path("scaling.png"))
