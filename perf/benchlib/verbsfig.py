"""Figures the verbs-port suites (rdmach-rc, udz-ud) measure alike: a figure is (kind, test,
size); kind "mpi" (Debian's MPICH) or "ompi" (Open MPI) runs an MPI program of the build
(mpi_glue/pingpong, perf/mpi_rotbuf, perf/mpi_osc), the other kinds ucx_perftest."""

import os

from .mpi import find_rotbuf, mpi_run

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
    d = "perf" if name == "mpi_osc" else "mpi_glue"
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
        OSC_RUNS[key] = {r["op"]: r for r in mpi_run(
            ctx, t, [prog, "-s", "8", "-i",
                     "300" if quick else "1000", "--csv"], "op", timeout * 4, impl=impl)}
    return float(OSC_RUNS[key][test.split("_")[1]]["lat_us_median"])
