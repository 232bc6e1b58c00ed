"""Measurements: CPU contention per run, the alternating campaign (repetitions x items x
transports, the transport order rotated every time), the Recorder of every single value, and
medians with quartiles."""

import csv
import statistics
import time

from . import fmt_size, fmt_val
from .env import C2C_BURSTS, c2c_mode, core_to_core_ns, same_mode_ratio
from .proc import MeasureError, log


def cpu_stall_us():
    """Kernel-wide CPU pressure ('some' total, usec): time in which some runnable task waited
    for a CPU. Its growth during a measurement, per wall-clock second, tells how much other
    load (other users of this 2-core VM) competed with the two benchmark processes."""
    try:
        with open("/proc/pressure/cpu") as f:
            for l in f:
                if l.startswith("some"):
                    return int(l.split("total=")[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def stall_fraction(s0, s1, seconds):
    """Share of `seconds` of wall time in which some task waited for a CPU, or None."""
    if s0 is None or s1 is None:
        return None
    return min(1.0, (s1 - s0) / 1e6 / max(seconds, 1e-3))


def measured(fn, retries, max_stall):
    """Runs fn(); returns (result, stall fraction or None, attempts). While the CPU stall during a
    run exceeds max_stall, re-runs up to `retries` more times and keeps the least-contended."""
    best = None
    for attempt in range(retries + 1):
        s0, t0 = cpu_stall_us(), time.time()
        res = fn()
        stall = stall_fraction(s0, cpu_stall_us(), time.time() - t0)
        if best is None or (stall is not None and stall < best[1]):
            best = (res, stall)
        if stall is None or stall <= max_stall:
            break
    return best[0], best[1], attempt + 1


def flag_stall(stall, tries, max_stall):
    """Progress-line mark: '!' = run was contended (CPU stall above --max-stall), 'rN' = N runs."""
    m = "" if tries == 1 else "(r%d)" % tries
    if stall is not None and stall > max_stall:
        m += "!"
    return m


def quartiles(v):
    v = sorted(v)
    if len(v) < 2:
        return v[0], v[0]
    q = statistics.quantiles(v, n=4, method="inclusive")
    return q[0], q[2]


def median(v):
    """The median of v, None when v is empty."""
    return statistics.median(v) if v else None


def spread(v):
    """(median, q1, q3) of the values v."""
    return (statistics.median(v),) + quartiles(v)


def alternating(reps, impls, items, who):
    """The order every MPI suite measures in: per repetition each MPI (impls: (name, label)),
    each item (a run, a mode) and each transport, the MPIs and transports rotated by one per
    repetition (and per item) so that none always runs first. Yields (rep, impl, i, item, t)."""
    for rep in range(reps):
        for impl, _ in rotated(impls, rep):
            for i, item in enumerate(items):
                for t in rotated(who, rep + i):
                    yield rep, impl, i, item, t


def paired(raw, fig, reps, ours, refs):
    """One figure of alternating repetitions, ours against each of refs. raw: rows (rep, fig,
    name, value). Returns the medians {name: value or None} and, per ref, the ratio of the
    medians ours / ref and the spread of the per-repetition ratios, (ratio, lo, hi), None
    where a side is missing."""
    val = {(rep, name): v for rep, j, name, v in raw if j == fig}
    med, ratio = {}, {}
    for name in (ours,) + tuple(refs):
        vs = [val[(r, name)] for r in range(reps) if (r, name) in val]
        med[name] = statistics.median(vs) if vs else None
    for ref in refs:
        per = [val[(r, ours)] / val[(r, ref)] for r in range(reps)
               if (r, ours) in val and (r, ref) in val and val[(r, ref)] > 0]
        ratio[ref] = ((med[ours] / med[ref], min(per), max(per))
                      if med[ours] and med[ref] and per else None)
    return med, ratio


def rotated(lst, k):
    k %= len(lst)
    return lst[k:] + lst[:k]


class Recorder:
    def __init__(self):
        self.rows = []  # dicts: section, size, transport, rep, metric, value
        self.errors = []

    def add(self, section, size, transport, rep, metric, value):
        self.rows.append(dict(section=section, size=int(size), transport=transport, rep=rep,
                              metric=metric, value=value))

    def values(self, section, size, transport, metric):
        return [r["value"] for r in self.rows if r["section"] == section and
                r["size"] == size and r["transport"] == transport and r["metric"] == metric]

    def mode(self, section, size, transport, rep):
        """The VM's core-to-core mode over that run (c2c_mode of its probes), or None."""
        probe = {r["metric"]: r["value"] for r in self.rows
                 if r["section"] == section and r["size"] == size and
                 r["transport"] == transport and r["rep"] == rep and
                 r["metric"] in ("c2c_before_ns", "c2c_after_ns")}
        return c2c_mode(probe.get("c2c_before_ns"), probe.get("c2c_after_ns"))

    def same_mode(self, section, size, metric, cand, base):
        """same_mode_ratio of cand / base in metric over the repetitions whose two runs both
        ran in one core-to-core mode of the VM: (median ratio or None, how many, near)."""
        val = {(r["rep"], r["transport"]): r["value"] for r in self.rows
               if r["section"] == section and r["size"] == size and r["metric"] == metric}
        return same_mode_ratio([
            (val[(rep, cand)] / val[(rep, base)], self.mode(section, size, cand, rep),
             self.mode(section, size, base, rep))
            for rep in sorted({k[0] for k in val})
            if (rep, cand) in val and val.get((rep, base))])

    def sizes(self, section):
        return sorted(set(r["size"] for r in self.rows if r["section"] == section))

    def write_raw(self, path):
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, ["section", "size", "transport", "rep", "metric", "value"])
            w.writeheader()
            w.writerows(self.rows)


def report_contention(ctx, rec, sections_keys, lead="\n"):
    """Prints the CPU contention of the runs in these sections; meta.json gets its median."""
    v = [r["value"] for r in rec.rows if r["metric"] == "cpu_stall" and r["value"] is not None
         and r["section"] in sections_keys]
    med = statistics.median(v) if v else None
    ctx.meta["cpu_stall_median"] = med
    if not v:
        print(lead + "CPU stall: not available (no /proc/pressure/cpu)")
        return
    print(lead + "CPU contention: median %.0f%% of each run's wall time some task waited for a "
          "CPU (max %.0f%%)%s" % (med * 100, max(v) * 100,
                                 "  -- the machine was busy: treat figures as rough"
                                 if med > 0.2 else ""))


def campaign(ctx, rec, items, reps, args, header, extra_metrics=(), describe=None,
             label=None, sec_width=15):
    """Runs items = [(section, size, transports, runner(t, size), metrics)] reps times; every
    repetition goes through every item and runs its transports back to back, in an order
    rotated on every item and repetition. runner returns {metric: value} (the first of
    `metrics` is shown on the progress line, extra_metrics are recorded when present and
    describe(result) may add to the line), or, when metrics is None, {size: {metric: value}}
    for a run that covers all sizes at once (its item's size 0 stands for 'all'). Each run is
    recorded with its CPU contention and the VM's core-to-core latency just before and after it
    (c2c_before_ns, c2c_after_ns: Recorder.same_mode); a MeasureError is recorded and the
    campaign goes on. header: the first progress line; '{total}' in it becomes the number of
    measurements."""
    label = label or (lambda t: t.name)
    total = sum(len(it[2]) for it in items) * reps
    done = 0
    log(header.replace("{total}", str(total)))
    c2c = core_to_core_ns(ctx.build, C2C_BURSTS)
    for rep in range(reps):
        for k, (sec, size, ts, runner, metrics) in enumerate(items):
            summary = []
            for t in rotated(ts, rep + k):
                done += 1
                t_start, c2c_before = time.time(), c2c
                try:
                    res, stall, tries = measured(lambda: runner(t, size), args.retry_contended,
                                                 args.max_stall)
                except MeasureError as e:
                    rec.errors.append("%s %s %s rep%d: %s" % (sec, fmt_size(size), t.name, rep, e))
                    log("bench: FAILED %s %s %s: %s" % (sec, fmt_size(size), t.name, e))
                    summary.append("%s=FAIL" % label(t))
                    continue
                finally:
                    c2c = core_to_core_ns(ctx.build, C2C_BURSTS)
                mark = flag_stall(stall, tries, args.max_stall)
                probes = (("c2c_before_ns", c2c_before), ("c2c_after_ns", c2c))
                if metrics:  # one size
                    for m in list(metrics) + [m for m in extra_metrics if m in res]:
                        rec.add(sec, size, t.name, rep, m, res[m])
                    rec.add(sec, size, t.name, rep, "cpu_stall", stall)
                    for m, v in probes:
                        rec.add(sec, size, t.name, rep, m, v)
                    summary.append("%s=%s%s%s" % (label(t), fmt_val(res[metrics[0]]),
                                                  describe(res) if describe else "", mark))
                else:  # all sizes of one run
                    for z, d in res.items():
                        for m, v in d.items():
                            rec.add(sec, z, t.name, rep, m, v)
                        rec.add(sec, z, t.name, rep, "cpu_stall", stall)
                        for m, v in probes:
                            rec.add(sec, z, t.name, rep, m, v)
                    summary.append("%s ok %.1fs%s" % (label(t), time.time() - t_start, mark))
            log("  [%3d/%d rep %d %4.0fs] %-*s %-8s %s" % (
                done, total, rep + 1, time.time() - ctx.t0, sec_width, sec,
                fmt_size(size) if size else "all", "  ".join(summary)))
