"""perf/bench hosts: what adding ud_zcopy costs traffic on a host (UCX_TLS=rdmach,ud_zcopy).

The design card's selection is rdmach between the processes of a host and ud_zcopy between
hosts. Adding ud_zcopy must cost the on-host traffic nothing measurable: once a process has a
peer on another host, every progress call also polls ud_zcopy, and it must find out that
nothing came without a system call (uct/ud_zcopy/udz_udp_ready.c). MPI ping-pong latency, 8 B,
between two ranks of one host, under MPICH 4.0.2 and Open MPI 4.1.4, in one run, alternating:

  rdmach              one host, UCX_TLS=rdmach,self: the reference (rdmach alone)
  rdmach,ud_zcopy     one host, UCX_TLS=rdmach,ud_zcopy,self
  2 hosts             rdmach,ud_zcopy,self on two namespace hosts (tests/mpi/hosts.sh), 2
                      ranks on each; the on-host pair's latency after every rank exchanged
                      messages with its partner across (tests/mpi/hosts --lat), so ud_zcopy is
                      connected and polled while it idles; the other ranks sleep
  posix               one host, stock UCX_TLS=posix,self (what sm gives)
  posix,tcp 2 hosts   stock UCX_TLS=posix,tcp,self in the same two-host job
  rdmach first, rdmach,ud_zcopy first
                      one host again, as a user's job meets it: the mean over 2,000 round
                      trips from the first one (perf/mpi_p2p -m lat -w 0), so whatever the
                      selection costs in a job's first milliseconds counts (ratios to
                      "rdmach first")

Latency is the median over a run's round trips (the "first" rows: the mean); figures are
medians over repetitions, with ratios to rdmach alone per repetition (median and range). Every run of the project's
transports must show in its counter files that rdmach carried the on-host traffic (two hosts:
on every host), and the two-host runs that ud_zcopy's idle polls went without system calls.
Target: rdmach,ud_zcopy within 1.1x of rdmach, on one host and on two, on both MPIs, and
within 1.05x from the first round trip. Writes
raw.csv, summary.csv, targets.csv, hosts.png and meta.json. Needs root (namespaces).
"""

import os
import shutil
import statistics
import subprocess
import tempfile
import time
from types import SimpleNamespace

import counters

from benchlib.env import Ctx
from benchlib.mpi import HOSTS_SH, LAUNCH, hosts_launch, parse_csv_rows, pinned, rank_ucx_env
from benchlib.plots import pyplot, save
from benchlib.proc import MeasureError, log, on_cleanup, run as run_cmd
from benchlib.report import print_checks, write_csv
from benchlib.stats import cpu_stall_us, rotated, stall_fraction

NAME = "hosts"
HELP = "on-host MPI latency with UCX_TLS=rdmach,ud_zcopy vs rdmach alone, one host and two"
CONTENTION = False
TIMEOUT = (20, "seconds per MPI launch (default 20: a run takes 2-5 s; stock MPICH over tcp sometimes hangs in MPI_Finalize)")
REPS_HELP = "repetitions (default 7, --quick 3)"
NET = "10.213.8"

# (name, UCX_TLS, ours, two hosts, mean from the first round trip)
CONFIGS = [("rdmach", "rdmach", True, False, False),
           ("rdmach,ud_zcopy", "rdmach,ud_zcopy", True, False, False),
           ("2 hosts", "rdmach,ud_zcopy", True, True, False),
           ("posix", "posix", False, False, False),
           ("posix,tcp 2 hosts", "posix,tcp", False, True, False),
           ("rdmach first", "rdmach", True, False, True),
           ("rdmach,ud_zcopy first", "rdmach,ud_zcopy", True, False, True)]
IMPLS = ["mpich", "openmpi"]
REF = "rdmach"
FIRST_REF = "rdmach first"
FIRST_ITERS = 2000


def add_arguments(p):
    p.add_argument("--quick", action="store_true", help="3 repetitions, fewer iterations")
    p.add_argument("--iters", type=int, default=None,
                   help="round trips per run (default 20000, quick 10000)")


def launch_cmd(ctx, cfg, impl, iters, cdir, timeout, prefix):
    name, tls, ours, two, first = cfg
    suffix = "ompi" if impl == "openmpi" else "mpich"
    if two:
        cmd = hosts_launch(impl, tls, prefix, 2, NET, timeout)
        prog = [os.path.join(ctx.build, "tests", "mpi", "hosts." + suffix), "--lat", "-i", str(iters)]
    else:
        cmd = [LAUNCH, "--impl", impl, "--tl", tls + ",self", "--no-preload",
               "--timeout", str(int(timeout)), "--env", "UCX_WARN_UNUSED_ENV_VARS=n", "-n", "2"]
        prog = [os.path.join(ctx.build, "tests", "mpi", "pingpong." + suffix), "-s", "8",
                "-i", str(iters), "--no-check", "--csv", "-"]
        if first:
            prog = [os.path.join(ctx.build, "perf", "mpi_p2p." + suffix), "-m", "lat",
                    "-s", "8", "-i", str(FIRST_ITERS), "-w", "0", "--csv"]
    if ours:
        cmd += ["--counters", os.path.join(cdir, "%h") if two else cdir]
        if ctx.preload:     # UCX 1.13.1; a 1.22 build's plugins come with rank_ucx_env
            cmd += ["--env", "LD_PRELOAD=" + ctx.preload]
    for k, v in rank_ucx_env(ctx, SimpleNamespace(ours=ours)).items():
        cmd += ["--env", "%s=%s" % (k, v)]
    # rank r on CPU r mod the CPUs (ranks of the second host sleep)
    return cmd + ["--"] + pinned(ctx, prog)


def check_counters(cfg, cdir, prefix):
    name, tls, ours, two, first = cfg
    if not ours:
        return ""
    dirs = [os.path.join(cdir, "%s-%s" % (prefix, h)) for h in "ab"] if two else [cdir]
    notes = []
    for d in dirs:
        ok, note = counters.carried(d, "rdmach", ranks=2)
        if not ok:
            raise MeasureError("%s: rdmach did not carry the on-host traffic in %s: %s"
                               % (name, d, note))
        notes.append(note)
    if two:
        free = counters.sums(dirs[0], "ud_zcopy").get("idle_polls_free", 0)
        calls = counters.sums(dirs[0], "ud_zcopy").get("ctl_recv_calls", 0)
        if free == 0:
            raise MeasureError("%s: ud_zcopy's idle polls all made system calls" % name)
        notes.append("ud_zcopy idle polls without a system call %d, receive calls %d"
                     % (free, calls))
    return "; ".join(notes)


def measure(ctx, cfg, impl, iters, timeout, prefix):
    cdir = tempfile.mkdtemp(prefix="bench-hosts-cnt.")
    try:
        cmd = launch_cmd(ctx, cfg, impl, iters, cdir, timeout, prefix)
        env = dict(os.environ, UCXEXT_BUILD=ctx.build)
        env.pop("LD_PRELOAD", None)
        rc, out, err = run_cmd(cmd, env, timeout + 30)
        if cfg[3]:
            lines = [l for l in out.splitlines() if l.startswith("onhost_lat_us ")]
            lat = float(lines[0].split()[1]) if lines else None
        elif cfg[4]:
            rows = parse_csv_rows(out, "mode")
            lat = float(rows[0]["lat_us_mean"]) if rows else None
        else:
            rows = parse_csv_rows(out, "bytes")
            lat = float(rows[0]["lat_us_median"]) if rows else None
        # perf/mpi_p2p checks no data and prints no PASS line: its table is the verdict
        passed = cfg[4] or ("PASS hosts" if cfg[3] else "PASS pingpong") in out
        if lat is not None and passed and rc != 0 and not cfg[2]:
            # measured and checked, then the run did not end: stock MPICH over tcp sometimes
            # hangs in MPI_Finalize (perf/README.md, "perf/bench unimem"); the figure stands
            log("bench hosts: %s %s: measured, but the run did not exit (rc %s): kept"
                % (impl, cfg[0], rc))
        elif lat is None or rc != 0 or not passed:
            raise MeasureError("%s %s: rc=%s %s" % (impl, cfg[0], rc,
                                                   (err.strip() or out.strip())[-600:]))
        return lat, check_counters(cfg, cdir, prefix)
    finally:
        shutil.rmtree(cdir, ignore_errors=True)


def run(args):
    if os.geteuid() != 0:
        log("bench hosts: needs root (network namespaces)")
        return 2
    reps = args.reps or (3 if args.quick else 7)
    iters = args.iters or (10000 if args.quick else 20000)
    ctx = Ctx(args, "hosts", only=["rdmach", "udzcopy"])
    for impl in IMPLS:
        suffix = "ompi" if impl == "openmpi" else "mpich"
        for prog in ("hosts", "pingpong"):
            f = os.path.join(ctx.build, "tests", "mpi", "%s.%s" % (prog, suffix))
            if not os.path.exists(f):
                ctx.discard()
                log("bench hosts: %s not built" % f)
                return 2
    prefix = "benchh%d" % os.getpid()
    subprocess.call([HOSTS_SH, "reap", "benchh"])
    if subprocess.call([HOSTS_SH, "up", prefix, NET]) != 0:
        ctx.discard()
        log("bench hosts: could not make the two hosts")
        return 1
    on_cleanup(lambda: subprocess.call([HOSTS_SH, "down", prefix]))
    load0, stall0, t0 = os.getloadavg()[0], cpu_stall_us(), time.time()
    raw, notes = [], {}
    try:
        for rep in range(reps):
            for impl in rotated(IMPLS, rep):
                for cfg in rotated(CONFIGS, rep):
                    lat, note = measure(ctx, cfg, impl, iters, args.timeout, prefix)
                    log("bench hosts: rep %d/%d %-7s %-18s %.3f us" % (rep + 1, reps, impl,
                                                                      cfg[0], lat))
                    raw.append({"rep": rep, "impl": impl, "config": cfg[0], "lat_us": lat})
                    if note:
                        notes.setdefault((impl, cfg[0]), note)
    except MeasureError as e:
        log("bench hosts: FAILED %s" % e)
        return 1
    finally:
        subprocess.call([HOSTS_SH, "down", prefix])
    elapsed = time.time() - t0
    stall = stall_fraction(stall0, cpu_stall_us(), elapsed)
    write_csv(ctx.path("raw.csv"), "rep,impl,config,lat_us",
              [(r["rep"], r["impl"], r["config"], "%.4f" % r["lat_us"]) for r in raw])
    summary = summarize(ctx, raw, reps)
    targets = check_targets(ctx, summary)
    png = plot(ctx, summary)
    ctx.meta.update({"reps": reps, "iters": iters, "elapsed_s": round(elapsed, 1),
                     "loadavg_before": load0, "loadavg_after": os.getloadavg()[0],
                     "cpu_pressure_some_pct": None if stall is None else round(100 * stall, 1),
                     "counters": {"%s %s" % k: v for k, v in notes.items()}, "png": png})
    print_tables(ctx, summary, targets, reps, iters, notes)
    ctx.finish()
    return 0


def summarize(ctx, raw, reps):
    """{(impl, config): median, min, max, ratio to rdmach alone (per rep: median, min, max)}"""
    summary = {}
    for impl in IMPLS:
        for cfg in CONFIGS:
            rname = FIRST_REF if cfg[4] else REF
            ref = {r["rep"]: r["lat_us"] for r in raw
                   if r["impl"] == impl and r["config"] == rname}
            v = {r["rep"]: r["lat_us"] for r in raw if r["impl"] == impl and r["config"] == cfg[0]}
            ratios = [v[k] / ref[k] for k in range(reps)]
            summary[(impl, cfg[0])] = {
                "median": statistics.median(v.values()), "min": min(v.values()),
                "max": max(v.values()), "ratio": statistics.median(v.values()) /
                statistics.median(ref.values()),
                "rep_ratio": statistics.median(ratios), "rep_ratio_min": min(ratios),
                "rep_ratio_max": max(ratios)}
    write_csv(ctx.path("summary.csv"), "impl,config,lat_us_median,lat_us_min,lat_us_max,"
              "ratio_vs_rdmach,rep_ratio_median,rep_ratio_min,rep_ratio_max",
              [(impl, name, "%.4f" % s["median"], "%.4f" % s["min"], "%.4f" % s["max"],
                "%.3f" % s["ratio"], "%.3f" % s["rep_ratio"], "%.3f" % s["rep_ratio_min"],
                "%.3f" % s["rep_ratio_max"]) for (impl, name), s in summary.items()])
    return summary


def check_targets(ctx, summary):
    targets = []
    for impl in IMPLS:
        for name in ("rdmach,ud_zcopy", "2 hosts"):
            v = summary[(impl, name)]["ratio"]
            targets.append(("%s %s / rdmach latency 8 B" % (impl, name), v, "<=", 1.1, v <= 1.1))
        v = summary[(impl, "rdmach,ud_zcopy first")]["ratio"]
        targets.append(("%s rdmach,ud_zcopy / rdmach, from the first" % impl, v,
                        "<=", 1.05, v <= 1.05))
    write_csv(ctx.path("targets.csv"), "target,value,op,limit,met",
              [(n, "%.3f" % v, op, "%.2f" % lim, "yes" if met else "no")
               for n, v, op, lim, met in targets])
    return targets


def print_tables(ctx, summary, targets, reps, iters, notes):
    meta = ctx.meta
    print("On-host MPI ping-pong latency, 8 B (usec, median of %d alternating runs of %d round "
          "trips; \"first\" rows: of the mean over %d from the first; ratio = median / median "
          "of rdmach alone, [per-repetition ratio range])" % (reps, iters, FIRST_ITERS))
    for impl in IMPLS:
        print("\n%s" % ("MPICH 4.0.2 ch4:ucx" if impl == "mpich" else "Open MPI 4.1.4 pml ucx"))
        print("%-20s %9s %17s %8s %15s" % ("config", "median", "[min-max]", "ratio",
                                            "[rep ratios]"))
        for cfg in CONFIGS:
            s = summary[(impl, cfg[0])]
            print("%-20s %9.3f %17s %7.2fx %15s" % (
                cfg[0], s["median"], "[%.3f-%.3f]" % (s["min"], s["max"]), s["ratio"],
                "[%.2f-%.2f]" % (s["rep_ratio_min"], s["rep_ratio_max"])))
    print_checks(targets, meta, 48)
    note = notes.get(("mpich", "2 hosts"))
    print("counters (MPICH, 2 hosts, first run): %s" % (note or "-"))
    print("results: %s" % ctx.out)


def plot(ctx, summary):
    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.38
    for i, impl in enumerate(IMPLS):
        xs = [k + (i - 0.5) * width for k in range(len(CONFIGS))]
        med = [summary[(impl, c[0])]["median"] for c in CONFIGS]
        lo = [m - summary[(impl, c[0])]["min"] for m, c in zip(med, CONFIGS)]
        hi = [summary[(impl, c[0])]["max"] - m for m, c in zip(med, CONFIGS)]
        ax.bar(xs, med, width, yerr=[lo, hi], capsize=3,
               label="MPICH" if impl == "mpich" else "Open MPI")
    ax.set_xticks(range(len(CONFIGS)))
    ax.set_xticklabels([c[0] for c in CONFIGS], fontsize=8)
    ax.set_ylabel("one-way latency, 8 B (us)")
    ax.set_title("On-host latency: rdmach alone, with ud_zcopy, and with a partner across")
    ax.legend()
    return save(plt, fig, ctx.path("hosts.png"))
