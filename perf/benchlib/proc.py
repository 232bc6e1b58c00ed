"""Child processes: every child runs in its own session and is killed (whole group) on timeout,
on error and when the bench exits or is interrupted, so no stray ucx_perftest/mpiexec stays."""

import atexit
import os
import signal
import subprocess
import sys
import time

_LIVE = set()
_CLEANUPS = []  # run before the children are killed (e.g. deleting the bench's namespaces)
# Every child carries this tag in its environment (inherited by mpiexec's ranks too, which Hydra
# starts in sessions of their own): on cleanup, any process still carrying it is killed.
RUN_TAG = "%d.%d" % (os.getpid(), int(time.time() * 1e6) % 1000000007)


def log(msg):
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def _signal_group(p, sig):
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _reap_tagged():
    needle = ("PERF_BENCH_TAG=%s" % RUN_TAG).encode()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open("/proc/%s/environ" % d, "rb") as f:
                if needle in f.read().split(b"\0"):
                    os.kill(int(d), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass


def stop(p):
    """TERM first (mpi_glue/launch then ends its MPI job itself), KILL the group after 3 s."""
    if p.poll() is None:
        _signal_group(p, signal.SIGTERM)
        try:
            p.wait(timeout=3)
        except subprocess.TimeoutExpired:
            pass
    _signal_group(p, signal.SIGKILL)
    try:
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    _LIVE.discard(p)


def on_cleanup(fn):
    """fn() runs once at exit or on SIGINT/SIGTERM, before the children are killed."""
    _CLEANUPS.append(fn)


def _cleanup():
    while _CLEANUPS:
        _CLEANUPS.pop()()
    for p in list(_LIVE):
        stop(p)
    _reap_tagged()


def _on_signal(signum, _frame):
    _cleanup()
    sys.stderr.write("\nbench: interrupted (signal %d), children killed\n" % signum)
    os._exit(128 + signum)


def install_handlers():
    atexit.register(_cleanup)
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)


def spawn(cmd, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE):
    env = dict(env, PERF_BENCH_TAG=RUN_TAG)
    p = subprocess.Popen([str(c) for c in cmd], env=env, stdout=stdout, stderr=stderr,
                         stdin=subprocess.DEVNULL, start_new_session=True, text=True)
    _LIVE.add(p)
    return p


def run(cmd, env, timeout):
    """Runs cmd; returns (rc or None on timeout, stdout, stderr)."""
    p = spawn(cmd, env)
    try:
        out, err = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        _signal_group(p, signal.SIGTERM)
        try:
            out, err = p.communicate(timeout=3)
        except subprocess.TimeoutExpired:
            _signal_group(p, signal.SIGKILL)
            out, err = p.communicate()
        rc = None
        _reap_tagged()
    _signal_group(p, signal.SIGKILL)  # the session may still hold grandchildren
    _LIVE.discard(p)
    return rc, out or "", err or ""


class MeasureError(Exception):
    """One measurement failed (it is recorded and the campaign goes on)."""
