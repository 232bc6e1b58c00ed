"""ucx_perftest: a server and a client process per measurement, on loopback or with the server
and the client in two network namespaces; the iteration policy of the bench."""

import socket
import subprocess
import tempfile
import time

from . import MiB
from .env import ucx_bin
from .proc import MeasureError, run, spawn, stop


def perftest_bin():
    return ucx_bin("ucx_perftest")   # the run's UCX (benchlib.env.UCX)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port, pid=None):
    """True when some socket listens on port (read from /proc: probing by connecting would be
    taken by ucx_perftest's server as its client). pid: look in that process's network
    namespace (/proc/<pid>/net is per namespace)."""
    hexport = ":%04X" % port
    base = "/proc/net" if pid is None else "/proc/%d/net" % pid
    for name in ("tcp", "tcp6"):
        try:
            with open("%s/%s" % (base, name)) as f:
                next(f)
                for line in f:
                    fld = line.split()
                    if len(fld) > 3 and fld[1].endswith(hexport) and fld[3] == "0A":
                        return True
        except OSError:
            pass
    return False


def parse_perftest(out):
    # UCX's own log lines ("[time] [host:pid] file:line UCX WARN ...") may come between the
    # header and the values on stdout
    lines = [l.strip() for l in out.splitlines() if not l.lstrip().startswith("[")]
    for i, l in enumerate(lines):
        if l.startswith("iterations,") and i + 1 < len(lines):
            keys = l.split(",")
            vals = lines[i + 1].split(",")
            if len(vals) == len(keys):
                try:
                    return {k: float(v) for k, v in zip(keys, vals)}
                except ValueError:
                    return None
    return None


def perftest(env, test, size, iters, warmup, uct=None, extra=(), timeout=120, pin=False,
             ns=None):
    """One ucx_perftest measurement; returns {'lat_us': p50 one-way, 'bw_MBps': overall (10^6)}.
    pin: server on CPU 0, client on CPU 1 (ucx_perftest -c). ns: a netns.Pair; the server runs
    in ns.a, the client in ns.b and connects to the server's address ns.addr_a."""
    srv_pre, cli_pre = (["ip", "netns", "exec", ns.a], ["ip", "netns", "exec", ns.b]) if ns \
        else ([], [])
    where = " in %s" % ns.a if ns else ""
    last = ""
    for attempt in range(3):
        port = free_port()
        with tempfile.TemporaryFile("w+") as serr:
            # a UCT test names its transport and device on the server too: UCX 1.22's server
            # checks them before it hears from the client ("A device must be specified")
            srv = spawn(srv_pre + [perftest_bin(), "-p", port] + (["-c", "0"] if pin else []) +
                        (["-x", uct[0], "-d", uct[1]] if uct else []), env,
                        stdout=subprocess.DEVNULL, stderr=serr)
            # in a namespace, `ip` execs ucx_perftest under the same pid: look into its net
            listen_pid = srv.pid if ns else None
            try:
                deadline = time.time() + 15
                if ns:
                    time.sleep(0.01)
                while not listening(port, listen_pid):
                    if srv.poll() is not None or time.time() > deadline:
                        break
                    time.sleep(0.003)
                if srv.poll() is not None or not listening(port, listen_pid):
                    serr.seek(0)
                    last = "server did not start listening on port %d%s: %s" % (
                        port, where, serr.read()[-400:])
                    continue
                cmd = cli_pre + [perftest_bin(), ns.addr_a if ns else "127.0.0.1", "-p", port,
                                 "-t", test, "-s", size, "-n", iters, "-w", warmup, "-v", "-f"]
                if uct:
                    cmd += ["-x", uct[0], "-d", uct[1]]
                if pin:
                    cmd += ["-c", "1"]
                cmd += list(extra)
                rc, out, err = run(cmd, env, timeout)
                try:
                    srv.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
                res = parse_perftest(out) if rc == 0 else None
                if res:
                    return {"lat_us": res["50.0_percentile_lat"],
                            "lat_us_avg": res["avg_lat"],
                            "bw_MBps": res["overall_bw"] * MiB / 1e6,
                            "iters": res["iterations"]}
                serr.seek(0)
                last = "client rc=%s: %s %s | server: %s" % (
                    "timeout" if rc is None else rc, err.strip()[-300:], out.strip()[-200:],
                    serr.read().strip()[-300:])
                if "refused" not in (err + out):
                    break
            finally:
                stop(srv)
    raise MeasureError(last)


# Iteration counts aim at a fixed nominal time per run (quick 50 ms, full 150 ms) from rough
# shared-memory speeds (0.2 us per small message, 5 GB/s copies); preemption on a busy VM can
# stretch a run many times over, so keeping the nominal time small keeps the total bounded.
def lat_iters(size, quick):
    t = 0.05 if quick else 0.15
    n = int(t / (2 * (0.2e-6 + size / 5e9)))
    return max(100, min(n, 20000 if quick else 50000))


def bw_iters(size, quick):
    t = 0.05 if quick else 0.15
    n = int(t / (0.1e-6 + size / 5e9))
    return max(8, min(n, 50000 if quick else 100000))


def warm(n):
    return max(4, n // 10)


def measure(env, test, size, quick, **kw):
    """perftest() with the bench's iteration policy for test (tag_lat/am_lat or tag_bw)."""
    n = (bw_iters if test.endswith("_bw") else lat_iters)(size, quick)
    return perftest(env, test, size, n, warm(n), **kw)
