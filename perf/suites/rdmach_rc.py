"""perf/bench rdmach-rc: rdmach's InfiniBand RC verbs wire against UCX's rc_verbs, on the same
verbs port (Soft-RoCE rxe0:1 in the verbs tier's qemu guest), alternating, same run.

Run it in the guest, results copied back to the host:

  tests/verbs/guest --results perf/results/rdmach-rc -- perf/bench rdmach-rc --out '$VERBS_RESULTS'

(perf/bench rdmach-rc --in-guest does exactly that from the host.) Figures:
  UCT (ucx_perftest -x TL -d rxe0:1):  am_lat 8 B, put_lat 8 B, put_bw 64 KiB and 1 MiB (zcopy)
  UCP (UCX_TLS=TL,ud_zcopy:aux, shm devices off so that the two local processes use the
       port):                          tag_lat 8 B, tag_bw 64 KiB and 1 MiB, put_lat 8 B,
                                       get 64 KiB, atomic fetch-add 8 B and 4 B,
                                       compare-swap 8 B (round-trip latency)
  MPI (same UCX settings), as users measure it, under both MPIs (mpi = Debian's MPICH
       4.0.2 ch4:ucx, ompi = Open MPI 4.1.4 pml/osc ucx):
       tests/mpi/pingpong               latency 8 B and 64 KiB (MPICH), 8 B (Open MPI),
                                       ping-pong bandwidth 1 MiB
       perf/mpi_rotbuf (MPICH)         windowed bandwidth (16 in flight) 64 KiB and 1 MiB
       perf/mpi_osc                    one-sided latency under lock_all + flush, as OSU's
                                       osu_{put,get,fop,cas}_latency: put and get 8 B,
                                       Fetch_and_op and Compare_and_swap on an int64
                                       (Open MPI's osc ucx uses rdmach's device atomics
                                       there; MPICH's ch4:ucx its own active messages)
Prints medians, the ratio rdmach / rc_verbs with the spread of the per-repetition ratios
(latency: lower is better; bandwidth: higher), writes raw.csv, summary.csv and ratios.png.
Soft-RoCE under TCG is slow and noisy in absolute terms: read the ratios.
"""

import csv

from benchlib import fmt_size
from benchlib.env import build_dir, Ctx, Transport
from benchlib.guest import run_in_guest
from benchlib.plots import pyplot, save
from benchlib.verbsfig import campaign, one, paired_table

NAME = "rdmach-rc"
HELP = "rdmach's RC verbs wire vs rc_verbs on a verbs port (Soft-RoCE in the verbs tier's guest)"
CONTENTION = False
TIMEOUT = (120, "seconds per ucx_perftest client run")

DEV = "rxe0:1"
# (kind, test, size, extra perftest args)
FIGURES = [
    ("uct", "am_lat", 8, []), ("uct", "put_lat", 8, []),
    ("uct", "put_bw", 65536, ["-D", "zcopy"]), ("uct", "put_bw", 1 << 20, ["-D", "zcopy"]),
    ("ucp", "tag_lat", 8, []), ("ucp", "tag_bw", 65536, []), ("ucp", "tag_bw", 1 << 20, []),
    ("ucp", "ucp_put_lat", 8, []), ("ucp", "ucp_get", 65536, []),
    # atomics: rdmach's device atomics (a 64-bit fetch-add or compare-swap is one device
    # atomic; a 32-bit fetch-add a compare-and-swap loop) against what UCP does over rc_verbs
    # on rxe, whose device atomics are not the full set UCP asks for: active messages
    ("ucp", "ucp_fadd", 8, []), ("ucp", "ucp_fadd", 4, []), ("ucp", "ucp_cswap", 8, []),
    ("mpi", "pingpong_lat", 8, []), ("mpi", "pingpong_lat", 65536, []),
    ("mpi", "pingpong_bw", 1 << 20, []),
    ("mpi", "window_bw", 65536, []), ("mpi", "window_bw", 1 << 20, []),
    ("mpi", "osc_put_lat", 8, []), ("mpi", "osc_get_lat", 8, []),
    ("mpi", "osc_fop_lat", 8, []),
    ("ompi", "pingpong_lat", 8, []), ("ompi", "pingpong_bw", 1 << 20, []),
    ("ompi", "osc_put_lat", 8, []), ("ompi", "osc_get_lat", 8, []),
    ("ompi", "osc_fop_lat", 8, []), ("ompi", "osc_cas_lat", 8, []),
]


def add_arguments(p):
    p.add_argument("--quick", action="store_true", help="3 repetitions, fewer iterations")
    p.add_argument("--in-guest", action="store_true",
                   help="boot the verbs tier's guest and run there (results to --out on the host)")
    p.add_argument("--tests",
                   help="only the figures of these tests (comma-separated: tag_lat,osc_fop_lat)")


def transports():
    both = []
    for tl in ("rdmach", "rc_verbs"):
        env = {"UCX_NET_DEVICES": DEV + ",lo", "UCX_SHM_DEVICES": "",
               "UCX_WARN_UNUSED_ENV_VARS": "n"}
        both.append(Transport(tl, tl + ",ud_zcopy:aux", (tl, DEV), ours=True, extra_env=env))
    return both


def in_guest(args):
    return run_in_guest(NAME, args.out or NAME,
                        (["--quick"] if args.quick else []) +
                        (["--reps", str(args.reps)] if args.reps else []) +
                        (["--tests", args.tests] if args.tests else []),
                        build=build_dir(args))


def run(args):
    if args.in_guest:
        return in_guest(args)
    ctx = Ctx(args, NAME)
    reps = args.reps or (3 if args.quick else 5)
    who = transports()
    figures = [f for f in FIGURES if not args.tests or f[1] in args.tests.split(",")]
    raw = campaign(ctx, "rdmach-rc", figures, who, reps,
                   lambda t, rep, kind, test, size, extra:
                   one(ctx, t, kind, test, size, extra, args.quick, args.timeout, rep))
    header, rows, missing = paired_table(raw, reps, figures, "rdmach", ("rc_verbs",))
    with open(ctx.path("summary.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    plot(ctx, rows)
    for m in missing:
        print("ERROR: no value: " + m)
    ctx.finish()
    print("results: %s" % ctx.out)
    # a figure with no value fails the run: a parse error once left every one-sided row out
    # of several runs that all exited 0
    return 1 if missing else 0


def plot(ctx, rows):
    plt = pyplot()
    if plt is None or not rows:
        return
    fig, ax = plt.subplots(figsize=(8, 1.5 + 0.28 * len(rows)))
    labels = ["%s %s %s" % (r[0], r[1], fmt_size(int(r[2]))) for r in rows]
    ratios = [float(r[6]) for r in rows]
    lo = [float(r[6]) - float(r[7]) for r in rows]
    hi = [float(r[8]) - float(r[6]) for r in rows]
    ax.barh(labels, ratios, xerr=[lo, hi], color="#4477aa")
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xlabel("rdmach / rc_verbs (latency: lower is better; bandwidth: higher)")
    ax.set_title("rdmach RC wire vs rc_verbs, Soft-RoCE under qemu TCG\n(medians, spread of "
                 "the per-repetition ratios)", fontsize=10)
    save(plt, fig, ctx.path("ratios.png"))
