"""perf/bench udzcopy: ud_zcopy vs UCX tcp on loopback and across a veth pair between two
network namespaces, tag_bw under 1% loss, the share of bytes received without a copy, memory
per peer."""

import os
import shutil
import tempfile

import counters

from benchlib import KiB, MiB, fmt_size, parse_sizes
from benchlib import epmem
from benchlib.env import STOCK, Ctx, Transport, tl_available
from benchlib.netns import Pair
from benchlib.perftest import measure
from benchlib.plots import COLORS, errorbar_panel, pyplot, save
from benchlib.proc import MeasureError, log
from benchlib.report import Section, Targets, close, summarize
from benchlib.stats import Recorder, campaign, report_contention

NAME = "udzcopy"
HELP = ("ud_zcopy vs tcp: tag_lat/tag_bw on loopback and across a veth pair between two "
        "namespaces, tag_bw under 1%% loss, zero-copy share, memory per peer (2..4096)")
NS_STEM = "udzb"       # namespaces udzb<pid>-a/-b (tests/fault/run uses udzf<pid>)
NS_NET = "10.213.2"    # udz0 addresses in the bench's namespaces: .1 (a), .2 (b)
EXTRA_METRICS = ["zcopy_share", "retransmits", "drop_pct"]
LOSS_REFS = (("veth_tag_bw_loss1", "1% loss", "veth_tag_bw_dgram"),
             ("veth_tag_bw_loss1run", "1% run loss", "veth_tag_bw"))


def add_arguments(p):
    p.add_argument("--quick", action="store_true", help="3 reps, peers 2,16,256")
    p.add_argument("--candidate", default="ud_zcopy",
                   help="transport under test (default ud_zcopy; tcp validates the harness)")
    p.add_argument("--sizes", help="tag_bw sizes (default 64K,1M,16M)")
    p.add_argument("--peers", help="endpoint counts for the memory table (default "
                   "2,16,256,4096; --quick 2,16,256)")
    p.add_argument("--skip", help="comma list of parts to skip: lo,veth,loss,lossrun,lat,bw,mem "
                   "(loss: 1%% loss per datagram; lossrun: 1%% loss per GSO run)")


def namespaces(skip):
    """The namespace pair for the veth and loss parts, or None (those parts then skipped)."""
    if {"veth", "loss"} <= skip:
        return None
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("nft"):
        log("bench: the veth and loss parts need root, iproute2 and nftables: skipped")
    else:
        ns = Pair(NS_STEM, NS_NET)
        try:
            ns.create()
            return ns
        except MeasureError as e:
            log("bench: %s: veth and loss parts skipped" % e)
    skip |= {"veth", "loss"}
    return None


def runner(ctx, args, ns, where, test, loss=0, unit=None):
    def fn(t, size):
        env = t.env(ctx)
        env["UCX_NET_DEVICES"] = "lo" if where == "lo" else "udz0"
        cdir = None
        if t.ours:
            cdir = tempfile.mkdtemp(prefix="udz-bench-")
            env["UCX_EXT_COUNTERS_DIR"] = cdir
        try:
            if where == "lo":
                res = measure(env, test, size, args.quick, timeout=args.timeout, pin=ctx.pin)
            else:
                # the loss rule for this transport: its datagrams (UDP), or for tcp its
                # TCP segments as well, so that both transports lose 1% of their packets
                ns.set_loss(loss, "udp" if t.ours or t.tls != "tcp" else "udp+tcp", unit)
                s0 = ns.counters()
                res = measure(env, test, size, args.quick, timeout=args.timeout, pin=ctx.pin,
                              ns=ns)
                if loss:
                    s1 = ns.counters()
                    seen, dropped = s1[0] - s0[0], s1[1] - s0[1]
                    res["drop_pct"] = 100.0 * dropped / seen if seen else 0.0
            if cdir:
                cs = counters.sums(cdir, t.tls)
                zc, cp = cs.get("rx_zcopy_bytes"), cs.get("rx_copy_bytes")
                if zc is not None and cp is not None and zc + cp > 0:
                    res["zcopy_share"] = zc / float(zc + cp)
                res["retransmits"] = float(sum(v for k, v in cs.items() if "retrans" in k))
        finally:
            if cdir:
                shutil.rmtree(cdir, ignore_errors=True)
        return res
    return fn


def items(ctx, args, ns, ts, skip, lat_sizes, bw_sizes):
    """(section, size, transports, runner, metrics) for the parts not skipped."""
    its = []
    r = lambda *a: runner(ctx, args, ns, *a)
    for w in [w for w in ("lo", "veth") if w not in skip and (w == "lo" or ns)]:
        if "lat" not in skip:
            its += [("%s_tag_lat" % w, z, ts, r(w, "tag_lat"), ["lat_us"]) for z in lat_sizes]
        if "bw" not in skip:
            its += [("%s_tag_bw" % w, z, ts, r(w, "tag_bw"), ["bw_MBps"]) for z in bw_sizes]
    if ns and "loss" not in skip:
        for z in bw_sizes:
            if "veth" in skip or "bw" in skip:  # the loss-free reference for the target
                its.append(("veth_tag_bw", z, ts, r("veth", "tag_bw"), ["bw_MBps"]))
            # the same wire without loss (runs cut into datagrams too): the loss figure's
            # reference, so that the ratio measures the loss and not the missing offload
            its.append(("veth_tag_bw_dgram", z, ts, r("veth", "tag_bw", 0, "datagram"),
                        ["bw_MBps"]))
            its.append(("veth_tag_bw_loss1", z, ts, r("veth", "tag_bw", 1), ["bw_MBps"]))
            if "lossrun" not in skip:
                its.append(("veth_tag_bw_loss1run", z, ts, r("veth", "tag_bw", 1, "run"),
                            ["bw_MBps"]))
    return its


def describe(res):
    extra = ""
    if "zcopy_share" in res:
        extra += " zc=%.0f%%" % (100 * res["zcopy_share"])
    if res.get("retransmits"):
        extra += " rtx=%d" % res["retransmits"]
    if "drop_pct" in res:
        extra += " drop=%.1f%%" % res["drop_pct"]
    return extra


def run(args):
    ctx = Ctx(args, "udzcopy")
    reps = args.reps or (3 if args.quick else 5)
    stock = args.candidate in STOCK
    # a stock candidate (--candidate tcp) validates the harness: it runs under another name
    cand = Transport(args.candidate + ("*" if stock else ""), args.candidate, ours=not stock)
    if not tl_available(ctx, cand):
        log("bench: transport '%s' is not available (build %s, preload '%s').\n"
            "       Build it, or validate the harness with a stock transport:\n"
            "       perf/bench udzcopy --candidate tcp --quick" %
            (cand.tls, ctx.build, ctx.preload_orig))
        ctx.discard()
        return 2
    base = STOCK["tcp"]
    ts = [cand, base]
    names = [t.name for t in ts]
    skip = set(args.skip.split(",")) if args.skip else set()
    lat_sizes = [8, 4 * KiB]
    bw_sizes = parse_sizes(args.sizes) if args.sizes else [64 * KiB, MiB, 16 * MiB]
    peers = [int(p) for p in (args.peers or ("2,16,256" if args.quick else "2,16,256,4096"))
             .split(",")]
    ns = namespaces(skip)
    ctx.meta.update(reps=reps, quick=args.quick, candidate=cand.name, baseline=base.name,
                    lat_sizes=lat_sizes, bw_sizes=bw_sizes, peers=peers,
                    netns=[ns.a, ns.b] if ns else None,
                    loss_rule="nftables in both namespaces, input on udz0: numgen random mod 100"
                              " < 1 drop; UDP for every transport, and TCP segments too while "
                              "tcp is measured (else tcp would see no loss)")
    rec = Recorder()
    campaign(ctx, rec, items(ctx, args, ns, ts, skip, lat_sizes, bw_sizes), reps, args,
             "bench: {total} measurements (%d reps, alternating %s), results in %s" %
             (reps, " / ".join(names), ctx.out), EXTRA_METRICS, describe, sec_width=18)
    if ns:
        ns.set_loss(0)
    mem_names = []
    if "mem" not in skip:
        mem_ts = [(cand, {"UCX_NET_DEVICES": "lo"}), (base, {"UCX_NET_DEVICES": "lo"})]
        rd = Transport("rdmach", "rdmach", ours=True)
        if cand.name != "rdmach" and tl_available(ctx, rd):
            mem_ts.append((rd, {}))
        mem_names = epmem.measure(ctx, args, mem_ts, peers, rec)
    if ns:
        ns.destroy()

    rec.write_raw(ctx.path("raw.csv"))
    print("\n=== %s vs %s: medians of %d alternating repetitions; ratio = %s / %s "
          "(latency: < 1 is better, bandwidth: > 1 is better); '~' = quartile spread > 15%%" %
          (cand.name, base.name, reps, cand.name, base.name))
    secs = [s for s in sections() if any(r["section"] == s.key and r["metric"] == s.metric
                                         for r in rec.rows)]
    med = summarize(rec, secs, names, cand.name, base.name, ctx.path("summary.csv"))
    if "mem" not in skip:
        epmem.report(ctx, rec, mem_names)
    targets(ctx, rec, med, cand.name, base.name)
    report_contention(ctx, rec, set(s.key for s in secs))
    return close(ctx, rec, ["raw.csv", "summary.csv", "targets.csv", "memory.csv", "meta.json"],
                 plot(ctx, rec, names, cand.name, mem_names))


def sections():
    mb = "MB/s (10^6 B/s)"
    return [
        Section("lo_tag_lat", "UCP tag latency, loopback (UCX_NET_DEVICES=lo; 50th pct, one way)",
                "lat_us", "usec", True),
        Section("lo_tag_bw", "UCP tag bandwidth, loopback (tag_bw)", "bw_MBps", mb, False),
        Section("veth_tag_lat", "UCP tag latency, veth between two namespaces (UCX_NET_DEVICES="
                "udz0)", "lat_us", "usec", True),
        Section("veth_tag_bw", "UCP tag bandwidth, veth", "bw_MBps", mb, False),
        Section("veth_tag_bw_dgram", "UCP tag bandwidth, veth with GSO runs cut into datagrams "
                "before it (gso_max_segs 1), no loss: the reference for 1% loss", "bw_MBps", mb,
                False),
        Section("veth_tag_bw_loss1", "UCP tag bandwidth, veth, nftables dropping 1% of the "
                "datagrams (tcp: of its MTU-sized TCP segments too; GSO runs cut before the "
                "veth)", "bw_MBps", mb, False),
        Section("veth_tag_bw_loss1run", "UCP tag bandwidth, veth, nftables dropping 1% of the "
                "packets as they cross the veth (a GSO run, or a 64 KiB tcp segment, is one "
                "packet)", "bw_MBps", mb, False),
        Section("lo_tag_bw", "share of bytes received without a copy, loopback "
                "(rx_zcopy_bytes / (rx_zcopy_bytes + rx_copy_bytes))", "zcopy_share",
                "fraction", False),
        Section("veth_tag_bw", "share of bytes received without a copy, veth", "zcopy_share",
                "fraction", False),
        Section("veth_tag_bw_loss1", "share of bytes received without a copy, veth, 1% loss",
                "zcopy_share", "fraction", False),
        Section("veth_tag_bw_loss1", "retransmissions per run (counters named *retrans*), "
                "veth, 1% loss", "retransmits", "count", True),
        Section("veth_tag_bw_loss1", "packets dropped by the rule during the run", "drop_pct",
                "% of packets seen", True),
    ]


def targets(ctx, rec, med, c, ref):
    t = Targets(with_same=True)
    for where, lat, bw in (("loopback", "lo_tag_lat", "lo_tag_bw"),
                           ("veth", "veth_tag_lat", "veth_tag_bw")):
        # the 8 B latency with the ratio over the runs in one core-to-core mode of the VM
        t.add("%s tag 8 B latency" % where, ref, med.get((lat, "lat_us", 8, c)),
              med.get((lat, "lat_us", 8, ref)), 1.0, True,
              same=rec.same_mode(lat, 8, "lat_us", c, ref))
        for z in sorted(set(k[2] for k in med if k[0] == bw and k[2] >= 64 * KiB)):
            t.add("%s tag bw %s" % (where, fmt_size(z)), ref, med.get((bw, "bw_MBps", z, c)),
                  med.get((bw, "bw_MBps", z, ref)), 1.0, False)
    for sec, what, refsec in LOSS_REFS:
        for z in sorted(set(k[2] for k in med if k[0] == sec)):
            t.add("veth %s bw %s" % (what, fmt_size(z)), "%s without loss" % c,
                  med.get((sec, "bw_MBps", z, c)), med.get((refsec, "bw_MBps", z, c)), 0.5,
                  False)
    t.write(ctx, "Targets (%s; reported, not tuned for):" % c)
    # for reference: what the same loss did to the baseline
    for sec, what, refsec in LOSS_REFS:
        for z in sorted(set(k[2] for k in med if k[0] == sec)):
            a, b = med.get((sec, "bw_MBps", z, ref)), med.get((refsec, "bw_MBps", z, ref))
            if a and b:
                print("  (%s under %s keeps %.2fx of its loss-free bandwidth at %s)" %
                      (ref, what, a / b, fmt_size(z)))


def plot(ctx, rec, names, cand, mem_names):
    plt = pyplot()
    if not plt:
        return None
    fig, axs = plt.subplots(1, 3, figsize=(17, 5))
    colors = dict(COLORS, **{cand: "tab:red", "rdmach": "tab:purple"})
    errorbar_panel(axs[0], rec, [("lo_tag_lat", "-", " loopback"), ("veth_tag_lat", "--", " veth")],
                   "lat_us", names, "UCP tag latency (50th pct, one way)", "usec", colors,
                   markers="os^", grow=False)
    errorbar_panel(axs[1], rec, [("lo_tag_bw", "-", " loopback"), ("veth_tag_bw", "--", " veth"),
                                 ("veth_tag_bw_loss1", ":", " veth, 1% loss")],
                   "bw_MBps", names, "UCP tag bandwidth (ucx_perftest tag_bw)", "GB/s", colors,
                   markers="os^", grow=False)
    ax = axs[2]
    any_data = False
    for n in mem_names:
        for m, ls, label in (("peer_state_per_ep", "-", " state counter"),
                             ("rss_per_ep", "--", " RSS growth")):
            xs = [z for z in rec.sizes("mem") if rec.values("mem", z, n, m)]
            ys = [rec.values("mem", z, n, m)[0] for z in xs]
            if xs and any(y > 0 for y in ys):
                any_data = True
                ax.plot(xs, [max(y, 1) for y in ys], "o" + ls, color=colors.get(n),
                        label=n + label)
    if any_data:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("peers (endpoints)")
        ax.legend(fontsize=7)
        ax.grid(True, alpha=0.3)
    else:
        ax.text(0.5, 0.5, "not measured", ha="center", transform=ax.transAxes)
    ax.set_title("memory per peer", fontsize=10)
    ax.set_ylabel("bytes per endpoint")
    fig.suptitle("%s vs %s: medians of %d alternating reps, bars = quartiles" %
                 (cand, ", ".join(n for n in names if n != cand), ctx.meta.get("reps", 0)),
                 fontsize=11)
    return save(plt, fig, ctx.path("udzcopy.png"))
