"""perf/bench resources: what a process and a node hold, from 2 processes to 1,048,576.

The resource model of "MVAPICH with XRC" (Panda, OFA 2007): connection resources per remote
host instead of per remote process. perf/resource_model computes it with the transports' own
sizing functions, the ones their allocations use (a live iface is checked against them:
tests/verbs/cases sizing, and the unit tests for the shm wire and ud_zcopy's peer table), for
a job where every process talks to every other, P processes per node, N nodes:

  rdmach_rc     rdmach's RC wire: a QP and a registered ring block per remote process
  rdmach_xrc    UCX_RDMACH_XRC: the same rings, QPs per remote host (the sharing core's
                steady state)
  ud_zcopy_ud   ud_zcopy on InfiniBand UD: a control QP and the CHANNELS zero-copy QPs per
                process, a peer record each
  rc_verbs      UCX's rc_verbs: a QP per remote process, RC_VERBS_TX_QUEUE_LEN send WQEs of
                --wqe-bytes each (ucx_info -c; device memory, not ring memory)
  ud_verbs      UCX's ud_verbs: one QP per process
  rdmach_shm    rdmach's shm wire for the P-1 processes of the node (a ring per sender in the
                process's segment; add it to the inter-node scheme's row)

The knobs are the defaults `ucx_info -c` reports with the transports preloaded (or what the
environment sets). Prints the headline table (64 processes per node), writes model.csv and
resources.png (log-log per process: QPs, pinned memory, setups against the job size, for 64
per node; crossovers marked, and where rdmach's rings exceed MAX_PEERS).
"""

import csv
import io
import os
import subprocess

from benchlib import parse_size
from benchlib.env import Ctx, tl_knobs
from benchlib.plots import pyplot, save
from benchlib.proc import log

NAME = "resources"
HELP = "resource model per process and node, 2 to 1,048,576 processes (rdmach RC/XRC, ud_zcopy, UCX rc/ud_verbs)"
CONTENTION = False
SCHEMES = ["rdmach_rc", "rdmach_xrc", "ud_zcopy_ud", "rc_verbs", "ud_verbs", "rdmach_shm"]
COLORS = {"rdmach_rc": "tab:red", "rdmach_xrc": "tab:orange", "ud_zcopy_ud": "tab:green",
          "rc_verbs": "tab:gray", "ud_verbs": "tab:olive", "rdmach_shm": "tab:blue"}
HEADLINE_PPN = 64


def add_arguments(p):
    p.add_argument("--quick", action="store_true", help="same as without (the model is exact)")
    p.add_argument("--ppn", default="1,2,4,8,16,32,64,128", help="processes per node")
    p.add_argument("--max-qp-wr", type=int, default=16384,
                   help="the device's max_qp_wr (bounds the QP depths; 16384: mlx5)")
    p.add_argument("--wqe-bytes", type=int, default=64,
                   help="bytes of a send WQE for rc_verbs' queue (64: mlx5's basic block)")


def fmt_bytes(n):
    for unit, k in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return "%.1f %s" % (n / k, unit)
    return "%d B" % n


def knob_args(ctx):
    """resource_model's options from the knobs ucx_info reports."""
    k = tl_knobs(ctx, "UCX_")
    def num(name, default):
        # auto: the value the RC wire takes (the model's rings are registered memory there)
        v = k.get(name, default)
        return str(parse_size(default if v == "auto" else v))
    return {"--slot-size": num("UCX_RDMACH_SLOT_SIZE", "256"),
            "--ring-size": num("UCX_RDMACH_RING_SIZE", "512"),
            "--large-ring-size": num("UCX_RDMACH_LARGE_RING_SIZE", "8192"),
            "--large-rings": num("UCX_RDMACH_LARGE_RINGS", "8"),
            "--chunk-size": num("UCX_RDMACH_CHUNK_SIZE", "16k"),
            "--lazy-tail": k.get("UCX_RDMACH_LAZY_TAIL", "0.25"),
            "--max-peers": num("UCX_RDMACH_MAX_PEERS", "256"),
            "--udz-channels": num("UCX_UD_ZCOPY_CHANNELS", "8"),
            "--rc-verbs-tx-queue": num("UCX_RC_VERBS_TX_QUEUE_LEN", "256")}


def crossings(xs, a, b):
    """x where curve a crosses curve b (geometric interpolation), on a log-log plot."""
    out = []
    for i in range(1, len(xs)):
        d0, d1 = a[i - 1] - b[i - 1], a[i] - b[i]
        if d0 == 0 or (d0 < 0) == (d1 < 0) or d1 == 0:
            continue
        f = abs(d0) / (abs(d0) + abs(d1))
        out.append((xs[i - 1] * (xs[i] / xs[i - 1]) ** f,
                    max(1, a[i - 1]) * (max(1, a[i]) / max(1, a[i - 1])) ** f))
    return out


def plot(ctx, rows, max_peers):
    plt = pyplot()
    if plt is None:
        return None
    # from two nodes on: one node has no off-node peers
    sel = [r for r in rows if int(r["ppn"]) == HEADLINE_PPN and int(r["nodes"]) >= 2]
    fig, axes = plt.subplots(1, 3, figsize=(17, 5.5))
    panels = [("qps_proc", "QPs per process"), ("pinned_proc", "pinned bytes per process"),
              ("setups_proc", "connection setups per process")]
    for ax, (metric, title) in zip(axes, panels):
        curves = {}
        for s in SCHEMES:
            pts = sorted((int(r["procs"]), int(r[metric])) for r in sel if r["scheme"] == s)
            if not pts or not any(v for _, v in pts):
                continue
            xs, ys = [p[0] for p in pts], [max(1, p[1]) for p in pts]
            curves[s] = (xs, ys)
            ax.plot(xs, ys, marker=".", color=COLORS[s], label=s,
                    linestyle="--" if s in ("rc_verbs", "ud_verbs") else "-")
        # crossovers between the inter-node schemes (rdmach_shm adds to them, it is no
        # alternative)
        names = [n for n in curves if n != "rdmach_shm"]
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                if curves[a][0] != curves[b][0]:
                    continue
                for x, y in crossings(curves[a][0], curves[a][1], curves[b][1]):
                    ax.plot([x], [y], marker="x", color="black", markersize=9)
                    ax.annotate("%s = %s\n~%d procs" % (a, b, round(x)), (x, y), fontsize=7,
                                xytext=(4, 4), textcoords="offset points")
        # rdmach's rings per iface are bounded by MAX_PEERS: off-node peers beyond it do not fit
        limit = HEADLINE_PPN + max_peers   # procs at which off-node peers = MAX_PEERS
        ax.axvline(limit, color="tab:red", linestyle=":", alpha=0.6)
        ax.text(limit, 0.97, " rdmach rings > MAX_PEERS=%d" % max_peers, color="tab:red",
                fontsize=7, va="top", transform=ax.get_xaxis_transform())
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("processes in the job (%d per node)" % HEADLINE_PPN)
        ax.set_title(title)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7)
    return save(plt, fig, ctx.path("resources.png"))


def run(args):
    ctx = Ctx(args, "resources", only=["rdmach", "udzcopy"])
    model = os.path.join(ctx.build, "perf", "resource_model")
    if not os.access(model, os.X_OK):
        ctx.discard()
        log("bench resources: %s not built (ninja -C %s)" % (model, ctx.build))
        return 2
    kargs = knob_args(ctx)
    common = ["--max-qp-wr", str(args.max_qp_wr), "--wqe-bytes", str(args.wqe_bytes)]
    for k, v in kargs.items():
        common += [k, v]
    cmd = [model, "--ppn", args.ppn] + common
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    sizing = subprocess.run([model, "--sizing"] + common, capture_output=True, text=True,
                            check=True).stdout
    with open(ctx.path("model.csv"), "w") as f:
        f.write(out)
    rows = list(csv.DictReader(io.StringIO(out)))
    ctx.meta.update({"resource_model": cmd, "sizing": dict(l.split("=", 1) for l in
                                                          sizing.split()), "knobs": kargs})
    max_peers = int(kargs["--max-peers"])

    print("\nSizing functions (the default knobs): %s" % ", ".join(sizing.split()))
    print("\nPer process, %d processes per node, every process talking to every other "
          "(off-node peers through the scheme, on-node through rdmach_shm):" % HEADLINE_PPN)
    hdr = "%-12s %9s %10s %12s %12s %12s %9s %5s" % ("scheme", "procs", "QPs", "QPs/node",
                                                    "pinned", "peer state", "setups", "fits")
    print(hdr)
    print("-" * len(hdr))
    for procs in (128, 1024, 16384, 131072, 1048576):
        for s in SCHEMES:
            for r in rows:
                if (r["scheme"] == s and int(r["ppn"]) == HEADLINE_PPN and
                        int(r["procs"]) == procs):
                    print("%-12s %9s %10s %12s %12s %12s %9s %5s" % (
                        s, r["procs"], r["qps_proc"], r["qps_node"],
                        fmt_bytes(int(r["pinned_proc"])), fmt_bytes(int(r["state_proc"])),
                        r["setups_proc"], "yes" if r["fits"] == "1" else "no"))
        print()
    png = plot(ctx, rows, max_peers)
    ctx.finish()
    print("wrote %s%s" % (ctx.path("model.csv"), (", " + png) if png else ""))
    return 0
