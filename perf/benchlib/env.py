"""The environment of a run: build dir, preload of the project's transports (snapshotted into
the results dir), the transports compared, the run's results dir and meta.json (Ctx), and the
helper programs (found in a build dir or compiled on demand)."""

import datetime
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

from . import RESULTS_DIR, TOP
from .proc import log, run

# The UCX of the run (Ctx sets it from the build's ucx-ext-build.env): Debian's 1.13.1, whose
# transports are preloaded, or another release's installed tree (the libucx-cu12 wheel's
# 1.22.0), whose libraries and tools then serve every process of the run, the built-ins'
# baselines included, and which loads the transports as plugins (UCX_PLUGIN_PATH).
UCX = {"version": "1.13.1", "prefix": ""}


def ucx_of_build(build):
    """{"version", "prefix"} of the UCX a build dir is for (prefix '' for Debian's)."""
    out = {"version": "1.13.1", "prefix": ""}
    try:
        with open(os.path.join(build, "ucx-ext-build.env")) as f:
            for l in f:
                k, _, v = l.strip().partition("=")
                if k == "UCX_EXT_UCX_VERSION" and v:
                    out["version"] = v
                elif k == "UCX_EXT_UCX_PREFIX":
                    out["prefix"] = v
    except OSError:
        pass
    # as in scripts/env: UCX_EXT_UCX_PREFIX in the environment names another installed tree of
    # the same release (the verbs tier's UCX 1.22.0 with verbs, benchlib/guest.py)
    if out["version"] != "1.13.1" and os.environ.get("UCX_EXT_UCX_PREFIX"):
        out["prefix"] = os.environ["UCX_EXT_UCX_PREFIX"]
    return out


def plugin_mode(build):
    return ucx_of_build(build)["version"] != "1.13.1"


def ucx_bin(name):
    """A UCX tool of the run's UCX (ucx_info, ucx_perftest)."""
    if UCX["prefix"]:
        return os.path.join(UCX["prefix"], "bin", name)
    return shutil.which(name) or os.path.join("/usr/bin", name)


UCX_INFO = ucx_bin("ucx_info")


def build_dir(args):
    return os.path.abspath(args.build or os.environ.get("UCXEXT_BUILD") or
                           os.path.join(TOP, "build"))


def perf_build_dir():
    return os.environ.get("UCX_EXT_PERF_BUILD", "/work/build-perf")


_PRELOAD_CACHE = {}


def build_env_script(build):
    """The scripts/env of the tree build was configured from (an older build's layout may
    differ from this tree's, e.g. a reference build of `perf/bench ab`), else this tree's."""
    try:
        with open(os.path.join(build, "meson-info", "meson-info.json")) as f:
            src = json.load(f)["directories"]["source"]
        script = os.path.join(src, "scripts", "env")
        if os.access(script, os.X_OK):
            return script
    except (OSError, ValueError, KeyError):
        pass
    return os.path.join(TOP, "scripts", "env")


def ext_preload(build):
    """Colon list of the project's built transports (what `scripts/env` exports), or ''."""
    if build in _PRELOAD_CACHE:
        return _PRELOAD_CACHE[build]
    if plugin_mode(build):
        return ""   # plugins: nothing is preloaded (Ctx.plugin_env)
    env = dict(os.environ, UCXEXT_BUILD=build)
    pre = ""
    script = build_env_script(build)
    if os.access(script, os.X_OK):
        rc, out, _ = run(["bash", "-c", 'eval "$("$0")" && printf %s "$UCXEXT_PRELOAD"', script],
                         env, 30)
        if rc == 0:
            pre = out.strip()
    if not pre:  # same rule as scripts/env, in case it is missing
        libs = [os.path.join(build, "uct", "libuct_%s.so" % t)
                for t in ("rdmach", "udzcopy", "unimem")]
        pre = ":".join(l for l in libs if os.path.isfile(l))
    _PRELOAD_CACHE[build] = pre
    return pre


def base_env(preload):
    """The caller's environment without our transports in LD_PRELOAD (baselines run stock)."""
    env = dict(os.environ)
    ours = set(p for p in (preload + ":" + ":".join(_PRELOAD_CACHE.values())).split(":") if p)
    ours |= set(p for p in env.get("LD_PRELOAD", "").split(":")
                if os.path.basename(p).startswith("libuct_"))
    keep = [p for p in env.get("LD_PRELOAD", "").split(":") if p and p not in ours]
    if keep:
        env["LD_PRELOAD"] = ":".join(keep)
    else:
        env.pop("LD_PRELOAD", None)
    env.pop("UCX_TLS", None)
    env.pop("UCX_PLUGIN_PATH", None)
    env["UCX_WARN_UNUSED_ENV_VARS"] = "n"
    env.update(ucx_lib_env())
    return env


def ucx_lib_env():
    """What every process of the run needs to run the run's UCX (nothing for Debian's)."""
    if not UCX["prefix"]:
        return {}
    lib = os.path.join(UCX["prefix"], "lib")
    old = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p and p != lib]
    return {"LD_LIBRARY_PATH": ":".join([lib] + old),
            "PATH": os.path.join(UCX["prefix"], "bin") + ":" + os.environ.get("PATH", "")}


def snapshot_plugins(build, out, only=None):
    """Copies a plugin build's transports (stub libuct_<name>.so.0 and libucx_ext_<name>.so)
    into <out>/plugins/ and returns ({UCX_PLUGIN_PATH, UCX_ALLOC_PRIO} for the ranks, info), as
    snapshot_preload does for a preload."""
    d = os.path.join(out, "plugins")
    os.makedirs(d, exist_ok=True)
    info = {}
    for t in ("rdmach", "udzcopy", "unimem"):
        if only and t not in only:
            continue
        for f in ("libuct_%s.so.0" % t, "libucx_ext_%s.so" % t):
            src = os.path.join(build, "uct", f)
            if not os.path.isfile(src):
                continue
            _wait_stable(src)
            dst = os.path.join(d, f)
            shutil.copy2(src, dst)
            with open(dst, "rb") as fh:
                info[dst] = {"source": src, "sha256": hashlib.sha256(fh.read()).hexdigest()}
    env = {"UCX_PLUGIN_PATH": d}
    script = os.path.join(TOP, "scripts", "env")
    rc, prio, _ = run(["bash", "-c", 'eval "$("$0")" && printf %s "${UCX_ALLOC_PRIO:-}"', script],
                      dict(os.environ, UCXEXT_BUILD=build), 30)
    if rc == 0 and prio.strip():
        env["UCX_ALLOC_PRIO"] = prio.strip()   # the transports' mds where the mm mds stand
    return env, info


def _wait_stable(path):
    """Waits out a file being written right now (a rebuild in parallel)."""
    for _ in range(20):
        try:
            a = os.stat(path)
            time.sleep(0.05)
            b = os.stat(path)
            if a.st_size == b.st_size and a.st_mtime == b.st_mtime and a.st_size > 0:
                return
        except OSError:
            pass
        time.sleep(0.5)


def snapshot_preload(preload, out):
    """Copies the built transports into <out>/preload/ and returns (colon list of the copies,
    {copy: {source, sha256}}): a rebuild during the run (the lead builds in parallel) can then
    neither mix two builds in one result nor break a process that loads a half-written file."""
    if not preload:
        return preload, {}
    d = os.path.join(out, "preload")
    os.makedirs(d, exist_ok=True)
    copies, info = [], {}
    for src in preload.split(":"):
        if not src:
            continue
        _wait_stable(src)
        # the stub UCX loads (libuct_<name>.so) loads the transport from beside itself
        # (libucx_ext_<name>.so, uct/common/ucx_ext_stub.c): both go into the snapshot
        base = os.path.basename(src)
        impl = os.path.join(os.path.dirname(src), "libucx_ext_" + base[len("libuct_"):])
        for f in [src] + ([impl] if base.startswith("libuct_") and os.path.isfile(impl) else []):
            if f != src:
                _wait_stable(f)
            dst = os.path.join(d, os.path.basename(f))
            shutil.copy2(f, dst)
            with open(dst, "rb") as fh:
                h = hashlib.sha256(fh.read()).hexdigest()
            if f == src:
                copies.append(dst)
            info[dst] = {"source": f, "sha256": h, "mtime": datetime.datetime.fromtimestamp(
                os.path.getmtime(f)).isoformat()}
    return ":".join(copies), info


class Transport:
    """One configuration to compare. tls: UCX_TLS for UCP/MPI; uct: (tl, device) for UCT tests;
    args: extra arguments for a program that takes the transport on its command line."""

    def __init__(self, name, tls, uct=None, ours=False, extra_env=None, args=()):
        self.name, self.tls, self.uct, self.ours = name, tls, uct, ours
        self.extra_env = extra_env or {}
        self.args = list(args)

    def env(self, ctx, mpi=False):
        e = base_env(ctx.preload)
        if self.ours:
            if ctx.preload:
                e["LD_PRELOAD"] = ":".join(p for p in (ctx.preload, e.get("LD_PRELOAD")) if p)
            e.update(getattr(ctx, "plugin_env", {}))
        e["UCX_TLS"] = self.tls + (",self" if mpi else "")
        e.update(self.extra_env)
        return e


STOCK = {
    "posix": Transport("posix", "posix", ("posix", "memory")),
    "sysv": Transport("sysv", "sysv", ("sysv", "memory")),
    "posix,cma": Transport("posix,cma", "posix,cma"),
    "cma": Transport("cma", "cma"),
    "tcp": Transport("tcp", "tcp", ("tcp", "lo")),
}


def make_candidate(name, dev):
    if name in STOCK:
        return STOCK[name]
    return Transport(name, name, (name, dev), ours=True)


def ucx_info(ctx, args, extra_env=None, ours=True):
    """ucx_info ARGS with our transports preloaded (stdout)."""
    env = base_env(ctx.preload)
    if ours:
        if ctx.preload:
            env["LD_PRELOAD"] = ctx.preload
        env.update(getattr(ctx, "plugin_env", {}))
    env.update(extra_env or {})
    return run([ucx_bin("ucx_info")] + list(args), env, 60)[1]


def tl_available(ctx, t):
    env = t.env(ctx)
    env.pop("UCX_TLS", None)
    rc, out, err = run([ucx_bin("ucx_info"), "-d"], env, 60)
    return rc == 0 and any(l.split(":", 1)[-1].strip() == t.tls.split(",")[0]
                           for l in out.splitlines() if "Transport:" in l)


def tl_knobs(ctx, prefix):
    """{UCX_<TL>_...: value} as ucx_info -c reports them with our transports preloaded."""
    return {l.split("=", 1)[0]: l.split("=", 1)[1] for l in ucx_info(ctx, ["-c", "-f"]).splitlines()
            if l.startswith(prefix)}


def ucx_version():
    rc, out, _ = run([ucx_bin("ucx_info"), "-v"], dict(os.environ, LD_PRELOAD="", **ucx_lib_env()), 30)
    for l in out.splitlines():
        if "Version" in l:   # 1.13: "# Version 1.13.1"
            return l.split("Version", 1)[1].strip()
        if "Library version:" in l:   # 1.22: "# Library version: 1.22.0"
            return l.split(":", 1)[1].strip()
    return "?"


def cpu_model():
    """The CPU's model name (/proc/cpuinfo), or None."""
    try:
        with open("/proc/cpuinfo") as f:
            for l in f:
                if l.startswith("model name"):
                    return l.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


# Core-to-core figures below this are the VM's near mode (vCPUs that share a cache: 40-80 ns
# measured), at or above it the far mode (230-250 ns).
C2C_NEAR_NS = 150.0
C2C_BURSTS = 5     # the core-to-core probe either side of every launch: 10-50 ms


def core_to_core_ns(build, bursts=None):
    """One cache line's trip from CPU 0 to CPU 1 now, in ns (perf/core_to_core.c: the same VM
    gave 40-80 and 230-250 at different times), or None where it cannot run. bursts: fewer
    for a probe between two launches (5: 10-50 ms)."""
    probe = os.path.join(build, "perf", "core_to_core")
    if not os.access(probe, os.X_OK) or (os.cpu_count() or 1) < 2:
        return None
    try:
        out = subprocess.run([probe] + ([str(bursts)] if bursts else []), capture_output=True,
                             text=True, timeout=30).stdout
        return float(out.strip())
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def c2c_mode(before, after):
    """The VM's mode over one launch from the probes either side of it: "near", "far", or None
    when a probe is missing or the two disagree (the mode changed during the launch)."""
    if before is None or after is None:
        return None
    near = (before < C2C_NEAR_NS, after < C2C_NEAR_NS)
    return "near" if all(near) else ("far" if not any(near) else None)


def same_mode_ratio(per_rep):
    """per_rep: (ratio, candidate's mode, baseline's mode) of each repetition (c2c_mode). The
    median ratio over the repetitions whose two launches both ran in one mode, how many there
    were, and how many of those in the near mode; (None, 0, 0) when there are none."""
    same = [(r, mc) for r, mc, mb in per_rep if mc is not None and mc == mb]
    return ((statistics.median(r for r, _ in same) if same else None), len(same),
            sum(1 for _, m in same if m == "near"))


class Ctx:
    """One run: its results dir, the preload snapshot taken into it, and meta.json.
    only: snapshot and preload only these transports' libraries (libuct_<name>.so)."""

    def __init__(self, args, sub, only=None):
        self.args = args
        self.build = build_dir(args)
        UCX.update(ucx_of_build(self.build))
        self.preload_orig = ext_preload(self.build)
        if only:
            self.preload_orig = ":".join(
                p for p in self.preload_orig.split(":")
                if os.path.basename(p) in ["libuct_%s.so" % o for o in only])
        self.pin = not getattr(args, "no_pin", False) and (os.cpu_count() or 1) >= 2
        name = args.out or "%s-%s%s" % (sub, datetime.datetime.now().strftime("%Y%m%d-%H%M%S"),
                                         "-quick" if getattr(args, "quick", False) else "")
        self.out = (name if os.path.isabs(name) or os.sep in name
                    else os.path.join(RESULTS_DIR, name))
        self.created = not os.path.exists(self.out)
        os.makedirs(self.out, exist_ok=True)
        self.t0 = time.time()
        self.preload, snap = snapshot_preload(self.preload_orig, self.out)
        self.plugin_env = {}
        if plugin_mode(self.build):
            self.plugin_env, snap = snapshot_plugins(
                self.build, self.out, [o.replace("_", "") for o in only] if only else None)
        self.meta = {
            "command": " ".join([os.path.relpath(sys.argv[0], TOP)] + sys.argv[1:]),
            "start": datetime.datetime.now().isoformat(timespec="seconds"),
            "host": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count(),
            "loadavg_start": os.getloadavg(), "build": self.build, "preload": self.preload,
            "pinned": self.pin, "preload_snapshot": snap,
            "ucx": ucx_version(), "ucx_prefix": UCX["prefix"], "plugin_env": self.plugin_env,
            "ucx_env_inherited": {k: v for k, v in os.environ.items()
                                                        if k.startswith("UCX_")},
            "cpu_model": cpu_model(),
            "core_to_core_ns": {"start": core_to_core_ns(self.build)},
        }

    def path(self, name):
        return os.path.join(self.out, name)

    def discard(self):
        """Removes the results dir of a run that measured nothing (if this run created it)."""
        if self.created:
            shutil.rmtree(self.out, ignore_errors=True)

    def finish(self):
        self.meta["loadavg_end"] = os.getloadavg()
        self.meta["core_to_core_ns"]["end"] = core_to_core_ns(self.build)
        self.meta.setdefault("elapsed_s", round(time.time() - self.t0, 1))
        with open(self.path("meta.json"), "w") as f:
            json.dump(self.meta, f, indent=2, default=str)
        latest = os.path.join(RESULTS_DIR, "latest")
        if os.path.dirname(os.path.abspath(self.out)) == RESULTS_DIR:
            try:
                if os.path.islink(latest) or not os.path.exists(latest):
                    if os.path.islink(latest):
                        os.unlink(latest)
                    os.symlink(os.path.basename(self.out), latest)
            except OSError:
                pass


def find_program(name, src, dirs, compile_cmd):
    """An executable `name` in one of dirs that is newer than its source src, else compiled into
    perf_build_dir() by compile_cmd(output) (a command list), else None."""
    for d in dirs:
        p = os.path.join(d, name)
        if os.access(p, os.X_OK) and os.path.getmtime(p) >= os.path.getmtime(src):
            return p
    os.makedirs(perf_build_dir(), exist_ok=True)
    p = os.path.join(perf_build_dir(), name)
    cmd = compile_cmd(p)
    if not cmd:
        return None
    rc, out, err = run(cmd, dict(os.environ), 120)
    if rc != 0:
        log("bench: cannot compile %s: %s" % (name, err[-500:]))
        return None
    return p
