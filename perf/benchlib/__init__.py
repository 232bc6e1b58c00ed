"""perf/benchlib: the library behind perf/bench (see perf/README.md).

  proc       child processes in their own sessions, killed with their group on exit or signal
  env        build dir, preload snapshot, transports, the results dir of a run (Ctx), programs
  perftest   ucx_perftest server/client pairs (loopback or two namespaces) and iteration counts
  mpi        MPICH runs through mpi_glue/launch and their CSV output
  netns      the two namespaces and loss rules of tests/fault/netns.sh
  epmem      memory per peer (perf/ep_memory)
  stats      CPU contention, the alternating campaign, medians and quartiles (Recorder)
  report     tables, summary.csv, targets
  plots      matplotlib helpers

This module holds the paths and the size/value formats every other one uses.
"""

import os
import sys

PERF_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOP = os.path.dirname(PERF_DIR)
RESULTS_DIR = os.path.join(PERF_DIR, "results")

KiB, MiB = 1024, 1024 * 1024

# the transport counter files are read by the project's one Python reader, ucp_ext/counters.py
sys.path.insert(0, os.path.join(TOP, "ucp_ext"))


def fmt_size(n):
    n = int(n)
    for unit, div in (("MiB", MiB), ("KiB", KiB)):
        if n >= div and n % div == 0:
            return "%d %s" % (n // div, unit)
    return "%d B" % n


def parse_size(s):
    s = s.strip().upper().rstrip("B").rstrip("I")
    mult = {"K": KiB, "M": MiB, "G": 1024 * MiB}
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def parse_sizes(s):
    return [parse_size(x) for x in s.split(",")]


def fmt_val(v):
    if v >= 1000:
        return "%.0f" % v
    if v >= 10:
        return "%.1f" % v
    if v >= 1:
        return "%.2f" % v
    return "%.3f" % v


def short(n):
    """A transport name as it appears in column and file names ('posix,cma' -> 'posix+cma')."""
    return n.replace(",", "+")
