"""The pairs the MPI suites compare (osc, p2p, lammps): each transport of the project against
the UCX built-in a user would otherwise pick, sm on one host and tcp for ud_zcopy."""

from .env import Transport

SM = Transport("sm", "sm")
TCP = Transport("tcp", "tcp")
# (candidate, baseline)
PAIRS = [(Transport("rdmach", "rdmach", ours=True), SM),
         (Transport("unimem", "unimem", ours=True), SM),
         (Transport("ud_zcopy", "ud_zcopy", ours=True), TCP)]


def transports(pairs):
    """The candidates and baselines of pairs, each once, in order (the alternating set)."""
    who = []
    for cand, base in pairs:
        who += [t for t in (cand, base) if t not in who]
    return who
