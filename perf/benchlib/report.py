"""Tables on stdout and their CSV files: one table per section (medians per size and transport,
ratios candidate/reference and candidate/best), summary.csv, and the target checks."""

import csv
import os

from . import fmt_size, fmt_val, short
from .stats import spread


class Section:
    def __init__(self, key, title, metric, unit, lower_better, xname="size", xfmt=None):
        self.key, self.title, self.metric, self.unit = key, title, metric, unit
        self.lower_better = lower_better
        self.xname, self.xfmt = xname, xfmt or fmt_size


def _table(rec, s, names, cand, ref, best_of):
    """Prints the table of section s; returns ({(size, name): median}, summary.csv rows)."""
    med, rows = {}, []
    sizes = rec.sizes(s.key)
    if not sizes:
        return med, rows
    present = [n for n in names if any(rec.values(s.key, z, n, s.metric) for z in sizes)]
    bases = [n for n in present if n != cand and (best_of is None or n in best_of)]
    w = {n: max(13, len(n) + 2) for n in present}
    print()
    print("%s  [%s, %s is better]" % (s.title, s.unit, "lower" if s.lower_better else "higher"))
    hdr = "%-9s" % s.xname + "".join("%*s" % (w[n], n) for n in present)
    if cand in present and ref in present:
        hdr += "%13s" % ("%s/%s" % (short(cand), short(ref)))
    if cand in present and len(bases) > 1:
        hdr += "%13s" % ("%s/best" % short(cand))
    print(hdr)
    for z in sizes:
        line = "%-9s" % s.xfmt(z)
        for n in present:
            v = rec.values(s.key, z, n, s.metric)
            if not v:
                line += "%*s" % (w[n], "-")
                continue
            m, q1, q3 = spread(v)
            med[(z, n)] = m
            noisy = (q3 - q1) > 0.15 * m
            line += "%*s%s" % (w[n] - 1, fmt_val(m), "~" if noisy else " ")
            rows.append(dict(section=s.key, metric=s.metric, unit=s.unit, size=z, transport=n,
                             n=len(v), median=m, q1=q1, q3=q3, min=min(v), max=max(v)))
        c = med.get((z, cand))
        if cand in present and ref in present:
            r = med.get((z, ref))
            line += "%12s " % (("%.2fx" % (c / r)) if c and r else "-")
        if cand in present and len(bases) > 1:
            bv = [med[(z, b)] for b in bases if (z, b) in med]
            best = (min(bv) if s.lower_better else max(bv)) if bv else None
            line += "%12s " % (("%.2fx" % (c / best)) if c and best else "-")
        print(line)
    ratio = "ratio_%s_over_%s" % (short(cand), short(ref))
    for r in rows:  # ratios in the CSV too
        c, rr = med.get((r["size"], cand)), med.get((r["size"], ref))
        r[ratio] = (c / rr) if c and rr else ""
    return med, rows


def summarize(rec, sections, names, cand, ref, path, best_of=None):
    """Prints one table per section and writes summary.csv (sections may share a key with
    different metrics). Returns {(section, metric, size, transport): median}.
    best_of: the baselines for the candidate/best column (default: every other transport)."""
    med_all, rows = {}, []
    for s in sections:
        med, srows = _table(rec, s, names, cand, ref, best_of)
        med_all.update({(s.key, s.metric, z, n): v for (z, n), v in med.items()})
        rows += srows
    with open(path, "w", newline="") as f:
        keys = ["section", "metric", "unit", "size", "transport", "n", "median", "q1", "q3",
                "min", "max", "ratio_%s_over_%s" % (short(cand), short(ref))]
        w = csv.DictWriter(f, keys, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()})
    return med_all


def close(ctx, rec, files, png=None):
    """The end of a campaign's report: failures, the list of outputs, meta.json; returns the
    exit status (1 if a measurement failed)."""
    if rec.errors:
        print("\n%d measurement(s) failed (see meta.json 'errors'); first: %s" %
              (len(rec.errors), rec.errors[0]))
    ctx.meta["errors"] = rec.errors
    print("\nresults: %s (%s)" % (ctx.out, ", ".join(
        files + ([os.path.basename(png)] if png else []))))
    ctx.finish()
    return 0 if not rec.errors else 1


def print_checks(targets, meta, width=42):
    """The end of an MPI suite's tables: its (name, value, op, limit, met) checks, then the
    run's contention (load average and CPU pressure, from meta)."""
    print("\ntargets:")
    for name, val, op, lim, met in targets:
        print("  %-*s %7.2f (%s %g)  %s" % (width, name, val, op, lim,
                                            "met" if met else "NOT MET"))
    print("\ncontention: load average %.2f -> %.2f on %d CPUs, CPU pressure (some) %s%% over "
          "%.0f s" % (meta["loadavg_before"], meta["loadavg_after"], os.cpu_count(),
                      meta["cpu_pressure_some_pct"], meta["elapsed_s"]))


class Targets:
    """Target checks: ratio of a measured value to a baseline against a goal, printed as
    PASS/MISS and written to targets.csv. with_aim adds the 'aim' column; with_same the ratio
    over the repetitions whose two runs ran in one core-to-core mode of the VM
    (Recorder.same_mode), with how many there were: PASS/MISS stays the median's."""

    def __init__(self, with_aim=False, name_width=26, with_same=False):
        self.rows, self.with_aim, self.name_width = [], with_aim, name_width
        self.with_same = with_same

    def add(self, name, base_name, value, base, goal, lower, aim=None, same=None):
        goal_s = ("<=" if lower else ">=") + "%.1fx" % goal
        aim_s = [("%.1fx" % aim) if aim else ""] if self.with_aim else []
        same_s = ([("%.2fx (%d)" % same[:2]) if same and same[0] is not None else ""]
                  if self.with_same else [])
        if value is None or not base:
            self.rows.append([name, base_name, "-", goal_s] + aim_s + ["n/a"] + same_s)
            return
        r = value / base
        ok = r <= goal if lower else r >= goal
        self.rows.append([name, base_name, "%.2fx" % r, goal_s] + aim_s +
                         ["PASS" if ok else "MISS"] + same_s)

    def write(self, ctx, title):
        """Prints the table under title and writes targets.csv (and meta.json's 'targets')."""
        fmt = ("%%-%ds %%-24s %%9s %%8s %%6s" % self.name_width + (" %6s" if self.with_aim else "")
               + ("  %s" if self.with_same else ""))
        print("\n" + title)
        print(fmt % (("target", "baseline", "measured", "goal") +
                     (("aim",) if self.with_aim else ()) + ("result",) +
                     (("same mode (reps)",) if self.with_same else ())))
        for r in self.rows:
            print(fmt % tuple(r))
        with open(ctx.path("targets.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["target", "baseline", "ratio", "goal"] +
                       (["aim"] if self.with_aim else []) + ["result"] +
                       (["same_mode"] if self.with_same else []))
            w.writerows(self.rows)
        ctx.meta["targets"] = self.rows


def write_csv(path, header, rows):
    """CSV with the values as formatted (a name such as posix,cma is quoted)."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header.split(","))
        w.writerows(rows)
