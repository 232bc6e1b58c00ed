"""MPICH runs of two ranks over one transport, and the CSV that the MPI programs print."""

import os
import shutil
import subprocess
import tempfile

from . import PERF_DIR, TOP
from .env import base_env, find_program, perf_build_dir, ucx_lib_env
from .proc import MeasureError, run

LAUNCH = os.path.join(TOP, "mpi_glue", "launch")


def launcher():
    """mpi_glue/launch, or None (UCX_EXT_PERF_NO_LAUNCH=1, or no launcher)."""
    if os.access(LAUNCH, os.X_OK) and not os.environ.get("UCX_EXT_PERF_NO_LAUNCH"):
        return LAUNCH
    return None


HOSTS_SH = os.path.join(TOP, "tests", "mpi", "hosts.sh")


def pinned(ctx, prog_args):
    """prog_args run with rank r on CPU r mod the CPUs when the context pins (the MPI programs
    are not ours: pinned from outside, by MPICH's or Open MPI's rank variable)."""
    if not ctx.pin:
        return list(prog_args)
    rank = "${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-0}}"
    return ["/bin/sh", "-c", 'exec taskset -c "$(( %s %% %d ))" "$0" "$@"'
            % (rank, os.cpu_count() or 1)] + list(prog_args)


def hosts_launch(impl, tls, prefix, per_host, net, timeout):
    """mpi_glue/launch's command (up to its options) for a job over the two namespace hosts
    of prefix (tests/mpi/hosts.sh), per_host ranks on each, started from the first host with
    the launcher's daemons on net; no preload of its own (the caller passes the run's)."""
    agent = subprocess.check_output([HOSTS_SH, "agent", prefix], text=True).strip()
    return [LAUNCH, "--impl", impl, "--tl", tls + ",self", "--no-preload",
            "--timeout", str(int(timeout)), "--env", "UCX_WARN_UNUSED_ENV_VARS=n",
            "--hosts", "%s-a:%d,%s-b:%d" % (prefix, per_host, prefix, per_host),
            "--agent", agent, "--via", "%s exec %s-a" % (HOSTS_SH, prefix),
            "--oob-net", net + ".0/24"]


def mpi_cmd(ctx, t, prog_args, nranks=2, counters=None, launch_timeout=None, impl="mpich"):
    """(cmd, env) for an MPI run of nranks ranks with the transport t (UCX_TLS=<tls>,self).
    Uses mpi_glue/launch when it exists, else mpiexec.mpich -genv (LD_PRELOAD to the ranks only,
    never into mpiexec itself). counters: UCX_EXT_COUNTERS_DIR of the ranks; launch_timeout:
    the launcher's own limit (it ends the MPI job itself); impl: mpich, or openmpi (only
    through the launcher)."""
    env = base_env(ctx.preload)
    prog_args = pinned(ctx, prog_args)
    rank_env = t.env(ctx, mpi=True)
    if launcher():
        env["UCXEXT_BUILD"] = ctx.build
        cmd = [LAUNCH, "--impl", impl, "--tl", t.tls + ",self", "-n", nranks]
        if launch_timeout:
            cmd += ["--timeout", launch_timeout]
        cmd += ["--env", "UCX_WARN_UNUSED_ENV_VARS=n"]
        for k, v in t.extra_env.items():
            cmd += ["--env", "%s=%s" % (k, v)]
        # never the launcher's own preload (it reads the build dir, which may be rebuilt
        # meanwhile): the run's snapshot for our transports, nothing for the baselines
        cmd.append("--no-preload")
        if counters:
            cmd += ["--counters", counters]
        if t.ours and rank_env.get("LD_PRELOAD"):
            cmd += ["--env", "LD_PRELOAD=" + rank_env["LD_PRELOAD"]]
        for k, v in rank_ucx_env(ctx, t).items():
            cmd += ["--env", "%s=%s" % (k, v)]
        return cmd + ["--"] + prog_args, env
    if impl != "mpich":
        raise MeasureError("%s needs mpi_glue/launch" % impl)
    cmd = ["mpiexec.mpich", "-n", nranks, "-genv", "UCX_TLS", rank_env["UCX_TLS"],
           "-genv", "UCX_WARN_UNUSED_ENV_VARS", "n"]
    for k, v in t.extra_env.items():
        cmd += ["-genv", k, v]
    if counters:
        cmd += ["-genv", "UCX_EXT_COUNTERS_DIR", counters]
    if t.ours and rank_env.get("LD_PRELOAD"):
        cmd += ["-genv", "LD_PRELOAD", rank_env["LD_PRELOAD"]]
    for k, v in rank_ucx_env(ctx, t).items():
        cmd += ["-genv", k, v]
    return cmd + prog_args, env


def rank_ucx_env(ctx, t):
    """The ranks' UCX when it is not Debian's (its libraries, for the built-ins' runs too) and
    our plugins (for ours): what the launcher is told with --no-preload."""
    e = {k: v for k, v in ucx_lib_env().items() if k == "LD_LIBRARY_PATH"}
    if t.ours:
        e.update(getattr(ctx, "plugin_env", {}))
    return e


def parse_csv_rows(text, first_col):
    """The rows of the CSV table whose header starts with first_col (numbers as floats)."""
    rows, header = [], None
    for l in text.splitlines():
        l = l.strip()
        if l.startswith(first_col + ","):
            header = l.split(",")
            continue
        if header and l and l[0].isalnum() and l.count(",") == len(header) - 1:
            row = {}
            for k, v in zip(header, l.split(",")):
                try:
                    row[k] = float(v)
                except ValueError:
                    row[k] = v
            rows.append(row)
    return rows


def mpi_run(ctx, t, prog_args, first_col, timeout, impl="mpich"):
    cmd, env = mpi_cmd(ctx, t, prog_args, impl=impl)
    rc, out, err = run(cmd, env, timeout)
    rows = parse_csv_rows(out, first_col)
    if rc != 0 or not rows:
        raise MeasureError("mpi rc=%s: %s" % ("timeout" if rc is None else rc,
                                              (err.strip() or out.strip())[-400:]))
    return rows


def mpi_run_carried(ctx, t, prog_args, timeout, impl="mpich", cwd=None, nranks=2):
    """(rc, stdout, stderr) of an MPI run of nranks ranks over t (in cwd if given); a
    project transport must show in its counters that it carried the run (MeasureError if
    not)."""
    import counters
    cdir = tempfile.mkdtemp(prefix="bench-mpi-cnt.") if t.ours else None
    try:
        cmd, env = mpi_cmd(ctx, t, prog_args, nranks=nranks, counters=cdir,
                           launch_timeout=str(int(timeout)), impl=impl)
        here = os.getcwd()
        os.chdir(cwd or here)
        try:
            rc, out, err = run(cmd, env, timeout + 30)
        finally:
            os.chdir(here)
        if t.ours and rc == 0:
            ok, note = counters.carried(cdir, t.tls, ranks=nranks)
            if not ok:
                raise MeasureError("%s did not carry %s: %s" % (t.name, " ".join(prog_args),
                                                               note))
        return rc, out, err
    finally:
        if cdir:
            shutil.rmtree(cdir, ignore_errors=True)


MPICC = {"mpich": "mpicc.mpich", "openmpi": "mpicc.openmpi"}   # by full name (see launch)
SUFFIX = {"mpich": "mpich", "openmpi": "ompi"}                  # as perf/meson.build names them


def find_perf_mpi(build, name, impl="mpich"):
    """perf/<name>.c for impl's MPI: <build>/perf/<name>.<suffix> (perf/meson.build's) when it
    is newer than its source, else compiled with that MPI's mpicc into $UCX_EXT_PERF_BUILD;
    None when neither works."""
    mpicc = shutil.which(MPICC[impl])
    src = os.path.join(PERF_DIR, name + ".c")
    return find_program("%s.%s" % (name, SUFFIX[impl]), src,
                        [os.path.join(build, "perf"), perf_build_dir()],
                        lambda out: mpicc and [mpicc, "-O2", "-o", out, src])


def find_rotbuf(ctx):
    return find_perf_mpi(ctx.build, "mpi_rotbuf")


def find_pingpong(ctx):
    p = os.path.join(ctx.build, "tests", "mpi", "pingpong.mpich")
    return p if os.access(p, os.X_OK) else None


def p2p_args(prog, mode, sizes):
    """perf/mpi_p2p's arguments for a mode of perf/bench p2p: lat, bw, bibw, mbw, bw-rot or
    bibw-rot (each receive of a window into its own buffer), and lat-fresh (the send buffer
    written again before each send); --csv."""
    base, _, variant = mode.partition("-")
    args = [prog, "-m", base, "-r", "rotate" if variant == "rot" else "one"]
    if variant == "fresh":
        args += ["-d", "fresh"]
    return args + ["-s", str(sizes), "--csv"]
