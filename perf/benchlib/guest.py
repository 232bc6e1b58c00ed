"""Runs a perf/bench suite inside the verbs tier's Soft-RoCE guest (tests/verbs/guest) and
copies its results back to perf/results/<name>/ (the guest writes them under /guestout)."""

import os
import subprocess
import sys

from . import TOP
from .proc import log

GUEST = os.path.join(TOP, "tests", "verbs", "guest")


def results_dir(name):
    return name if os.path.isabs(name) else os.path.join(TOP, "perf", "results", name)


def run_in_guest(suite, out, fwd, timeout=3600, mem=None, mtu=None):
    """perf/bench SUITE --out /guestout/results FWD... in the guest; out: the host's results
    dir (a name under perf/results or a path). Returns the guest's exit status."""
    out = results_dir(out)
    cmd = [GUEST, "--timeout", str(timeout)] + (["--mem", str(mem)] if mem else []) + \
          (["--mtu", str(mtu)] if mtu else []) + \
          ["--results", out, "--", sys.executable, os.path.join(TOP, "perf", "bench"), suite,
           "--out", "/guestout/results"] + list(fwd)
    log("%s: %s" % (suite, " ".join(cmd)))
    rc = subprocess.call(cmd)
    print("results: %s" % out)
    return rc
