"""Memory per peer: perf/ep_memory -n N (N peer workers in forked processes, one endpoint to
each) for a list of transports, its table and memory.csv."""

import csv
import os
import shutil
import tempfile

import counters

from . import PERF_DIR, TOP, fmt_val
from .env import find_program, perf_build_dir
from .proc import log, run

# the target-side columns (peer_*) go to memory.csv only: there each peer is a fresh worker,
# whose first connection also pays for lazily created per-iface state
METRICS = [("peer_state_per_ep", "per-peer state: transport counter peer_state_bytes / peers"),
           ("rss_per_ep", "RSS growth per peer (one endpoint each), in the process with N peers"),
           ("fds_per_ep", "file descriptors per peer, in the process with N peers")]


def find_ep_memory(ctx):
    src = os.path.join(PERF_DIR, "ep_memory.c")

    def compile_cmd(out):
        cc = shutil.which("cc") or shutil.which("gcc")
        if not cc:
            return None
        rc, flags, _ = run(["pkg-config", "--cflags", "--libs", "ucx"], dict(os.environ), 30)
        return [cc, "-O2", "-o", out, src] + flags.split()
    return find_program("ep_memory", src, [os.path.join(ctx.build, "perf"),
                                           os.path.join(TOP, "build-fault", "perf"),
                                           perf_build_dir()], compile_cmd)


def measure(ctx, args, transports, peers, rec):
    """transports: [(Transport, extra env)]; records section 'mem' into rec. Returns the names
    measured."""
    prog = find_ep_memory(ctx)
    if not prog:
        rec.errors.append("memory: no ep_memory program")
        log("bench: no ep_memory program (perf/ep_memory.c): memory table skipped")
        return []
    names = [t.name for t, _ in transports]
    log("bench: memory per peer, ep_memory -n %s for %s" % (",".join(map(str, peers)),
                                                           " / ".join(names)))
    for n in peers:
        summ = []
        for t, extra in transports:
            env = dict(t.env(ctx), **extra)
            if t.tls == "rdmach":
                env["UCX_RDMACH_MAX_PEERS"] = str(n + 16)
            cmd = [prog, "-n", n, "-q"]
            if t.tls == "ud_zcopy":  # N+1 peer ifaces on one host: 2 UDP ports each, not 9
                cmd += ["-P", "UCX_UD_ZCOPY_CHANNELS=1"]
            cdir = tempfile.mkdtemp(prefix="udz-mem-")
            if t.ours:
                env["UCX_EXT_COUNTERS_DIR"] = cdir
            try:
                rc, out, err = run(cmd, env, max(args.timeout, 60) * 3)
                f = out.strip().splitlines()[-1].split(",") if out.strip() else []
                if rc != 0 or len(f) != 9:
                    msg = "memory %s %d peers: rc=%s %s" % (t.name, n, rc, (err or out)[-300:])
                    rec.errors.append(msg)
                    log("bench: FAILED " + msg)
                    summ.append("%s=FAIL" % t.name)
                    continue
                rec.add("mem", n, t.name, 0, "rss_per_ep", float(f[2]))
                rec.add("mem", n, t.name, 0, "fds_per_ep", float(f[4]))
                rec.add("mem", n, t.name, 0, "peer_rss_per_ep", float(f[6]))
                rec.add("mem", n, t.name, 0, "peer_fds_per_ep", float(f[7]) / n)
                # the measured process's own file (the forked peers write theirs too)
                fn = os.path.join(cdir, "%s.%s" % (t.tls, f[8]))
                state = counters.read_file(fn).get("peer_state_bytes") \
                    if os.path.exists(fn) else None
                if state is not None:  # n peers + the warm-up one are alive at exit
                    rec.add("mem", n, t.name, 0, "peer_state_per_ep", state / (n + 1))
                summ.append("%s=%s B/ep%s" % (t.name, f[2], "" if state is None else
                                              " (state %.0f)" % (state / (n + 1))))
            finally:
                shutil.rmtree(cdir, ignore_errors=True)
        log("  memory %5d peers: %s" % (n, "  ".join(summ)))
    return names


def report(ctx, rec, names):
    """Prints the memory tables and writes memory.csv."""
    peers = rec.sizes("mem")
    if not peers:
        return
    print("\nMemory per peer (perf/ep_memory: one process with endpoints to N peer workers in "
          "other processes, flushed; bytes per peer; '-' = not exposed)")
    rows = [dict(metric=m, peers=z, transport=n, value=round(v[0], 3))
            for m in ("peer_rss_per_ep", "peer_fds_per_ep") for z in peers for n in names
            for v in [rec.values("mem", z, n, m)] if v]
    for m, title in METRICS:
        if not any(rec.values("mem", z, n, m) for z in peers for n in names):
            continue
        print("\n%s" % title)
        print("%-8s" % "peers" + "".join("%14s" % n for n in names))
        for z in peers:
            line = "%-8d" % z
            for n in names:
                v = rec.values("mem", z, n, m)
                line += "%14s" % (fmt_val(v[0]) if v else "-")
                if v:
                    rows.append(dict(metric=m, peers=z, transport=n, value=round(v[0], 3)))
            print(line)
    with open(ctx.path("memory.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, ["metric", "peers", "transport", "value"])
        w.writeheader()
        w.writerows(rows)
