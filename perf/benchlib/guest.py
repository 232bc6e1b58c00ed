"""Runs a perf/bench suite inside the verbs tier's Soft-RoCE guest (tests/verbs/guest) and
copies its results back to perf/results/<name>/ (the guest writes them under /guestout)."""

import os
import subprocess
import sys

from . import TOP
from .env import ucx_of_build
from .proc import log

GUEST = os.path.join(TOP, "tests", "verbs", "guest")


def results_dir(name):
    return name if os.path.isabs(name) else os.path.join(TOP, "perf", "results", name)


def verbs_ucx(build):
    """Environment for a guest run of build: a build for another UCX than Debian's runs on that
    release built with verbs (the wheel has none), as tests/verbs/run does; None and a message
    when that tree is missing."""
    ver = ucx_of_build(build)["version"]
    if ver == "1.13.1":
        return {}, None
    prefix = os.environ.get("UCX_EXT_UCX_PREFIX") or os.path.join(
        os.environ.get("UCX_EXT_CACHE", "/var/cache/ucx-ext"), "ucx-%s-verbs" % ver)
    if not os.path.exists(os.path.join(prefix, "lib", "ucx", "libuct_ib.so.0")):
        return None, ("no UCX %s with verbs at %s (build it: UCXEXT_BUILD=%s "
                      "tests/uct_gtest/build)" % (ver, prefix, build))
    return {"UCX_EXT_UCX_PREFIX": prefix}, None


def run_in_guest(suite, out, fwd, timeout=3600, mem=None, mtu=None, build=None):
    """perf/bench SUITE --out /guestout/results FWD... in the guest; out: the host's results
    dir (a name under perf/results or a path); build: the build dir the guest runs (its UCX
    version picks the UCX tree). Returns the guest's exit status."""
    out = results_dir(out)
    env = dict(os.environ)
    if build:
        extra, err = verbs_ucx(build)
        if err:
            log("%s: %s" % (suite, err))
            return 1
        env.update(extra, UCXEXT_BUILD=build)
    cmd = [GUEST, "--timeout", str(timeout)] + (["--mem", str(mem)] if mem else []) + \
          (["--mtu", str(mtu)] if mtu else []) + \
          ["--results", out, "--", sys.executable, os.path.join(TOP, "perf", "bench"), suite,
           "--out", "/guestout/results"] + (["--build", build] if build else []) + list(fwd)
    log("%s: %s" % (suite, " ".join(cmd)))
    rc = subprocess.call(cmd, env=env)
    print("results: %s" % out)
    return rc
