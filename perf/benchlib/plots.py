"""matplotlib helpers: the pyplot module (or None), message-size axes, median/quartile series
and a panel of error-bar curves per section and transport."""

from . import KiB, MiB, fmt_size
from .proc import log
from .stats import spread

COLORS = {"rdmach": "tab:red", "posix": "tab:blue", "posix,cma": "tab:green", "tcp": "tab:gray",
          "sysv": "tab:purple", "cma": "tab:olive"}


def pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except ImportError:
        log("bench: matplotlib missing (apt-get install python3-matplotlib): no plot")
        return None


def save(plt, fig, path):
    """Lays out, writes (110 dpi) and closes fig; returns path."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def size_axis(ax):
    ticks = [8, 64, 512, 4 * KiB, 32 * KiB, 256 * KiB, MiB, 4 * MiB, 16 * MiB, 64 * MiB,
             256 * MiB]
    ax.set_xscale("log", base=2)  # first: the ticks are picked within the log-scale limits
    lo, hi = ax.get_xlim()
    ticks = [t for t in ticks if lo <= t <= hi]
    ax.set_xticks(ticks)
    ax.set_xticklabels([fmt_size(t).replace(" ", "") for t in ticks], fontsize=8)
    ax.set_xlabel("message size")
    ax.grid(True, which="major", alpha=0.3)


def series(rec, sec, metric, name, xs_from=None, scale=1.0):
    """(xs, medians, [lower, upper] quartile distances) of a transport in a section, over the
    section's sizes (or the xs_from list), scaled."""
    xs, ys, lo, hi = [], [], [], []
    for z in (rec.sizes(sec) if xs_from is None else xs_from):
        v = rec.values(sec, z, name, metric)
        if v:
            m, q1, q3 = spread(v)
            xs.append(z)
            ys.append(m * scale)
            lo.append(max(0.0, m - q1) * scale)
            hi.append(max(0.0, q3 - m) * scale)
    return xs, ys, [lo, hi]


def errorbar_panel(ax, rec, curves, metric, names, title, unit, colors, cand=None,
                   markers="os", grow=True):
    """One panel: a curve per (section, line style, label suffix) in curves and transport in
    names, medians with quartile bars over message sizes, log-log. GB/s panels show the MB/s
    values / 1000. cand is drawn thicker; grow: markers grow with the curve index."""
    any_data = False
    scale = 1e-3 if unit == "GB/s" else 1.0
    for si, (sec, ls, label) in enumerate(curves):
        for n in names:
            xs, ys, err = series(rec, sec, metric, n, scale=scale)
            if not xs:
                continue
            any_data = True
            style = dict(lw=1.6 if n == cand else 1.1, alpha=0.95) if cand else {}
            ax.errorbar(xs, ys, yerr=err, elinewidth=0.8, fmt=markers[si % len(markers)] + ls,
                        ms=3.5 + si if grow else 4, capsize=2, color=colors.get(n),
                        label=n + label, **style)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(unit)
    ax.set_yscale("log")  # also for bandwidth: a ratio is the same vertical distance everywhere
    if any_data:
        size_axis(ax)
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "not measured", ha="center", transform=ax.transAxes)
    return any_data
