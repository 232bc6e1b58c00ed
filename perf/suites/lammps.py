"""perf/bench lammps: LAMMPS timesteps per second over the project's transports and the
built-ins, as the MPI-over-RDMA papers report their application runs: Debian's lmp (Open MPI
4.1.4), 2 ranks, peptide (lammps-examples, 300 steps) and rhodo (the rhodopsin benchmark, 100
steps, 32000 atoms; scripts/bootstrap fetches it), alternating transports in one run.

Pairs (candidate / baseline): rdmach / sm, unimem / sm, ud_zcopy / tcp. rhodo is
compute-bound on 2 ranks at this size (about 12 s a run), so the transports differ little;
peptide is lighter and shows communication more. Every candidate run must show in its counters
that its transport carried it. Writes raw.csv, summary.csv, lammps.png and meta.json.
"""

import os
import shutil
import statistics
import tempfile

from benchlib.env import Ctx
from benchlib.mpi import mpi_run_carried
from benchlib.pairs import PAIRS, transports
from benchlib.plots import pyplot, save
from benchlib.proc import MeasureError, log
from benchlib.report import write_csv
from benchlib.stats import rotated

NAME = "lammps"
HELP = "LAMMPS (peptide, rhodopsin) timesteps/s over the transports vs sm and tcp, Open MPI"
CONTENTION = False
TIMEOUT = (300, "seconds per LAMMPS run")
DATA = os.path.join(os.environ.get("UCX_EXT_CACHE", "/var/cache/ucx-ext"), "lammps")
PEPTIDE = "/usr/share/lammps/examples/peptide"
INPUTS = ["peptide", "rhodo"]


def add_arguments(p):
    p.add_argument("--quick", action="store_true", help="3 repetitions")
    p.add_argument("--only", help="inputs, comma-separated (default peptide,rhodo)")


def measure(ctx, t, work, inp, timeout):
    rc, out, err = mpi_run_carried(ctx, t, ["lmp", "-in", "in." + inp, "-log", "none"],
                                   timeout, impl="openmpi", cwd=work)
    tps = [float(l.split()[-2]) for l in out.splitlines()
           if l.startswith("Performance:") and l.endswith("timesteps/s")]
    if rc != 0 or not tps:
        raise MeasureError("%s %s: rc=%s %s" % (inp, t.name, rc,
                                               (err.strip() or out.strip())[-400:]))
    return tps[0]


def run(args):
    reps = args.reps or (3 if args.quick else 5)
    inputs = args.only.split(",") if args.only else INPUTS
    if not shutil.which("lmp") or not os.path.exists(os.path.join(DATA, "data.rhodo")):
        log("bench lammps: needs lmp and %s/{in,data}.rhodo (scripts/bootstrap)" % DATA)
        return 2
    ctx = Ctx(args, NAME)
    work = tempfile.mkdtemp(prefix="bench-lammps.")
    for d, names in ((PEPTIDE, ["in.peptide", "data.peptide"]), (DATA, ["in.rhodo", "data.rhodo"])):
        for n in names:
            shutil.copy(os.path.join(d, n), work)
    who = transports(PAIRS)
    raw = []
    try:
        for rep in range(reps):
            for i, inp in enumerate(inputs):
                for t in rotated(who, rep + i):
                    try:
                        v = measure(ctx, t, work, inp, args.timeout)
                    except MeasureError as e:
                        log("bench lammps: %s" % e)
                        continue
                    raw.append((rep, inp, t.name, v))
                    log("bench lammps: rep %d/%d %-8s %-9s %8.3f timesteps/s" % (
                        rep + 1, reps, inp, t.name, v))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    write_csv(ctx.path("raw.csv"), "rep,input,transport,timesteps_per_s",
              [(r, i, n, "%.4f" % v) for r, i, n, v in raw])
    rows = []
    print("\nLAMMPS, Open MPI 4.1.4, 2 ranks: timesteps/s (median of %d alternating runs; "
          "ratio = candidate / baseline, [per-repetition range]; higher is better)" % reps)
    print("%-8s %-9s %10s %-5s %10s %8s %15s" % ("input", "candidate", "steps/s", "base",
                                                 "steps/s", "ratio", "[range]"))
    for inp in inputs:
        for cand, base in PAIRS:
            c = {r: v for r, i, n, v in raw if i == inp and n == cand.name}
            b = {r: v for r, i, n, v in raw if i == inp and n == base.name}
            per = [c[r] / b[r] for r in c if r in b]
            if not c or not b or not per:
                continue
            mc, mb = statistics.median(c.values()), statistics.median(b.values())
            rows.append((inp, cand.name, base.name, mc, mb, mc / mb, min(per), max(per)))
            print("%-8s %-9s %10.3f %-5s %10.3f %7.2fx %15s" % (
                inp, cand.name, mc, base.name, mb, mc / mb, "[%.2f-%.2f]" % (min(per), max(per))))
    write_csv(ctx.path("summary.csv"), "input,candidate,baseline,candidate_steps_per_s,"
              "baseline_steps_per_s,ratio,ratio_min,ratio_max",
              [r[:3] + tuple("%.4f" % x for x in r[3:]) for r in rows])
    ctx.meta.update({"reps": reps, "png": plot(ctx, rows)})
    ctx.finish()
    print("results: %s" % ctx.out)
    return 0


def plot(ctx, rows):
    plt = pyplot()
    if plt is None or not rows:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.5))
    labels = ["%s %s/%s" % (r[0], r[1], r[2]) for r in rows]
    ax.barh(labels, [r[5] for r in rows], xerr=[[r[5] - r[6] for r in rows],
                                                [r[7] - r[5] for r in rows]], color="#4477aa")
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xlabel("timesteps/s, candidate / baseline (higher is better)")
    ax.set_title("LAMMPS over the transports, Open MPI, 2 ranks", fontsize=10)
    return save(plt, fig, ctx.path("lammps.png"))
